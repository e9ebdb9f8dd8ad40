"""On-disk records of `judgekit eval`: one Parquet row per (sweep point, problem), resumable and shardable.

Layout of an evaluation directory::

    eval.json                              schema version + the run's shared settings (task, models, ...)
    records-r{rank:03d}-{seq:06d}.parquet  per-problem records, written atomically by one rank
    summary.md / summary.csv               the per-point summary (written once every pair is done)
    be_quality.png / truncation.png        the plots

A rank commits a shard every few problems (unique temp file, fsync, rename), so a killed run loses at most the
problems in flight; a rerun reads every shard, skips the (point, problem) pairs already present and continues.
Readers merge the shards of all ranks and drop duplicate pairs (two ranks can only duplicate a pair if they
were launched with different world sizes), so the merged table is the same whatever the sharding was.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from judgekit.store.atomic import atomic_write_bytes, atomic_write_table
from judgekit.errors import JudgekitError
from judgekit.provenance import provenance

SCHEMA_VERSION = 2  # 2: records keep the problem's prompt text and reference answer
MANIFEST = "eval.json"
KIND = "judgekit.eval"
META_VERSION = b"judgekit.schema_version"
META_KIND = b"judgekit.kind"
_SHARD_RE = re.compile(r"^records-r(\d{3,})-(\d{6,})\.parquet$")
# Settings that may change between a run and its resumption without changing what a record means.
_RESUMABLE = frozenset({"limit"})

RECORD_SCHEMA = pa.schema([
    ("point", pa.string()),  # key of the sweep point (rule, params, temperature, block size, seed)
    ("config", pa.string()),  # key of the point without its seed: the summary's row
    ("label", pa.string()),
    ("rule", pa.string()),
    ("params", pa.string()),  # JSON object of the rule's parameters
    ("temperature", pa.float64()),
    ("block_size", pa.int32()),
    ("seed", pa.int64()),
    ("problem", pa.string()),
    ("completion_ids", pa.list_(pa.int32())),
    ("text", pa.string()),
    ("finish_reason", pa.string()),
    ("outcome", pa.string()),  # JSON of the task's outcome
    ("correct", pa.bool_()),
    ("new_tokens", pa.int64()),
    ("target_calls", pa.int64()),
    ("draft_calls", pa.int64()),
    ("accept_hist", pa.list_(pa.int32())),  # accept_hist[n] = verification steps that accepted n drafts
    ("wall_time", pa.float64()),
    ("prompt", pa.string()),  # the problem's question (the decoder saw it through task.build_prompt)
    ("reference", pa.string()),  # JSON of the problem's reference answer (or tests)
    ("rank", pa.int32()),
], metadata={META_VERSION: str(SCHEMA_VERSION).encode(), META_KIND: KIND.encode()})


def _fingerprint(settings: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in settings.items() if k not in _RESUMABLE}


def read_manifest(out_dir: str | Path) -> dict[str, Any]:
    path = Path(out_dir) / MANIFEST
    if not path.exists():
        raise JudgekitError(f"{out_dir} is not an evaluation directory (no {MANIFEST})")
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise JudgekitError(f"corrupt {path}: {err}") from None
    if data.get("kind") != KIND or data.get("schema_version") != SCHEMA_VERSION:
        raise JudgekitError(f"{path}: not a judgekit eval manifest of schema version {SCHEMA_VERSION}")
    return data["settings"]


def list_shards(out_dir: Path) -> list[tuple[int, int, Path]]:
    out = []
    for path in out_dir.iterdir() if out_dir.is_dir() else ():
        m = _SHARD_RE.match(path.name)
        if m:
            out.append((int(m.group(1)), int(m.group(2)), path))
    return sorted(out)


def read_records(out_dir: str | Path, columns: list[str] | None = None) -> pa.Table:
    """All ranks' records merged, one row per (point, problem), in (rank, shard, row) order."""
    out_dir = Path(out_dir)
    read_manifest(out_dir)
    tables = []
    for _, _, path in list_shards(out_dir):
        try:
            meta = pq.read_schema(path).metadata or {}
            if meta.get(META_KIND) != KIND.encode() or meta.get(META_VERSION) != str(SCHEMA_VERSION).encode():
                raise JudgekitError(f"{path}: not a judgekit eval shard of schema version {SCHEMA_VERSION}")
            tables.append(pq.read_table(path).select(RECORD_SCHEMA.names).cast(RECORD_SCHEMA))
        except (OSError, pa.ArrowException) as err:
            raise JudgekitError(f"corrupt shard {path}: {err}") from None
    table = pa.concat_tables(tables) if tables else RECORD_SCHEMA.empty_table()
    if table.num_rows:
        seen: set[tuple[str, str]] = set()
        keep = []
        for i, pair in enumerate(zip(table.column("point").to_pylist(), table.column("problem").to_pylist())):
            if pair not in seen:
                seen.add(pair)
                keep.append(i)
        if len(keep) < table.num_rows:
            table = table.take(keep)
    return table.select(columns) if columns else table


class RecordWriter:
    """Appends one rank's records to an evaluation directory, creating or checking its manifest."""

    def __init__(self, out_dir: str | Path, settings: dict[str, Any], rank: int = 0) -> None:
        self.dir = Path(out_dir)
        self.rank = rank
        self.dir.mkdir(parents=True, exist_ok=True)
        manifest = self.dir / MANIFEST
        if manifest.exists():
            old = read_manifest(self.dir)
            diff = [f"{k} {old.get(k)!r}, not {settings.get(k)!r}"
                    for k in sorted(set(_fingerprint(old)) | set(_fingerprint(settings)))
                    if old.get(k) != settings.get(k)]
            if diff:
                raise JudgekitError(f"{self.dir} holds another evaluation ({'; '.join(diff)}); use a new --out")
        else:
            payload = {"kind": KIND, "schema_version": SCHEMA_VERSION, "settings": settings, "provenance": provenance((settings.get("target"), settings.get("draft")), [settings.get("data_file")])}
            # Every rank may race to create it; the content is identical, and the write is atomic.
            atomic_write_bytes(manifest, json.dumps(payload, indent=2, sort_keys=True).encode(), rank)
        for tmp in self.dir.glob(f"*.r{rank:03d}.*.tmp"):
            tmp.unlink(missing_ok=True)  # a write of this rank that was killed
        mine = [seq for r, seq, _ in list_shards(self.dir) if r == rank]
        self.seq = max(mine, default=-1) + 1

    def done(self) -> set[tuple[str, str]]:
        """(point, problem) pairs already recorded by any rank."""
        t = read_records(self.dir, ["point", "problem"])
        return set(zip(t.column("point").to_pylist(), t.column("problem").to_pylist()))

    def write(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        table = pa.Table.from_pylist([{**r, "rank": self.rank} for r in rows], schema=RECORD_SCHEMA)
        atomic_write_table(self.dir / f"records-r{self.rank:03d}-{self.seq:06d}.parquet", table, self.rank)
        self.seq += 1
