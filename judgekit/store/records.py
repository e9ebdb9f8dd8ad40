"""On-disk records of `judgekit eval`: one Parquet row per (sweep point, problem), resumable and shardable.

Layout of an evaluation directory (built on the sharded-directory core, :mod:`judgekit.store.shards`)::

    eval.json                              kind, schema version + the run's shared settings (task, models,
                                           the data file's path *and* sha256, ...)
    records-r{rank:03d}-{seq:06d}.parquet  per-problem records, written atomically by one rank
    .judgekit.lock, .judgekit.r{rank}.lock the writers' locks (one process per rank)
    summary.md / summary.csv               the per-point summary (written once every pair is done)
    be_quality.png / truncation.png        the plots

A rank commits a shard every few problems (unique temp file, fsync, rename), so a killed run loses at most the
problems in flight; a rerun reads every shard, skips the (point, problem) pairs already present and continues.
Readers merge the shards of all ranks and drop duplicate pairs (two ranks can only duplicate a pair if they
were launched with different world sizes), so the merged table is the same whatever the sharding was. Every
read checks each shard's kind, version and exact columns and verifies its page checksums: a damaged shard is
one error naming the file, never a changed result.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from judgekit.errors import JudgekitError
from judgekit.provenance import provenance
from judgekit.store.atomic import atomic_write_table
from judgekit.store.shards import (
    EVAL,
    KIND_FILES,
    META_KIND,
    META_VERSION,
    WriterLock,
    clean_temps,
    list_rank_shards,
    read_manifest as _read_json,
    read_schema,
    read_verified,
    require_kind,
    settings_diff,
    shard_name,
    without,
    write_manifest,
)

# 2: eval.json records the data file's sha256, records the judge's weights sha256; 3: records keep the problem's
# prompt text and reference answer; 4: records say which draft tree ran (null: a chain)
SCHEMA_VERSION = 4
READABLE = (1, 2, 3, 4)  # older directories are still read (summaries, plots), never resumed
MANIFEST = KIND_FILES[EVAL]
KIND = "judgekit.eval"
PREFIX = "records"
# sha256 of a shard's values: the page checksums cover the data pages but not the footer, whose column offsets
# a flipped bit can point at another column's pages; the digest catches that (and any other silent change).
META_DIGEST = b"judgekit.content_sha256"


def content_digest(table: pa.Table) -> str:
    """sha256 over every column's name and values (as JSON): the same records give the same digest whatever
    the file's layout."""
    import hashlib
    import json

    h = hashlib.sha256()
    for name in table.column_names:
        h.update(name.encode() + b"\0")
        h.update(json.dumps(table.column(name).to_pylist(), default=str).encode() + b"\0")
    return h.hexdigest()
# Settings that may change between a run and its resumption without changing what a record means.
_RESUMABLE = frozenset({"limit"})


def _schema(version: int) -> pa.Schema:
    fields = [
        ("point", pa.string()),  # key of the sweep point (rule, params, temperature, block size, seed)
        ("config", pa.string()),  # key of the point without its seed: the summary's row
        ("label", pa.string()),
        ("rule", pa.string()),
        ("params", pa.string()),  # JSON object of the rule's parameters
    ]
    if version >= 2:
        fields.append(("judge_sha256", pa.string()))  # sha256 of the judge's weights file (judge points)
    fields += [
        ("temperature", pa.float64()),
        ("block_size", pa.int32()),
    ]
    if version >= 4:
        fields.append(("tree", pa.string()))  # the static draft tree's spec (2,2,1,1, eagle); null for a chain
    fields += [
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
    ]
    if version >= 3:
        fields += [("prompt", pa.string()),  # the problem's question (the decoder saw it through task.build_prompt)
                   ("reference", pa.string())]  # JSON of the problem's reference answer (or tests)
    fields.append(("rank", pa.int32()))
    return pa.schema(fields, metadata={META_VERSION: str(version).encode(), META_KIND: KIND.encode()})


RECORD_SCHEMA = _schema(SCHEMA_VERSION)
_SCHEMAS = {v: _schema(v) for v in READABLE}


# ------------------------------------------------------------------------------------------------ manifest


def _manifest(out_dir: Path) -> tuple[int, dict[str, Any]]:
    """(schema version, settings) of a directory's eval.json, checked; JudgekitError naming the file."""
    path = out_dir / MANIFEST
    if not path.is_file():
        raise JudgekitError(f"{out_dir} is not an evaluation directory (no {MANIFEST})")
    doc = _read_json(path)
    version, settings = doc.get("schema_version"), doc.get("settings")
    if doc.get("kind") != KIND or version not in READABLE or not isinstance(settings, dict):
        raise JudgekitError(f"{path}: not a judgekit eval manifest of schema version "
                            f"{' or '.join(map(str, READABLE))}")
    return version, settings


def read_manifest(out_dir: str | Path) -> dict[str, Any]:
    """The run settings recorded in a directory's eval.json."""
    return _manifest(Path(out_dir))[1]


def check_eval_dir(out_dir: str | Path, settings: dict[str, Any]) -> bool:
    """Refuse (JudgekitError) a directory of another kind, of an older schema, or of another evaluation;
    True when it already holds this evaluation. Reads only: a refused run leaves the directory as it was."""
    out_dir = Path(out_dir)
    require_kind(out_dir, EVAL)
    if not (out_dir / MANIFEST).exists():
        return False
    version, old = _manifest(out_dir)
    if version != SCHEMA_VERSION:
        raise JudgekitError(f"{out_dir} was written by an older judgekit (eval schema version {version}, this one "
                            f"writes {SCHEMA_VERSION}): `judgekit plot` still reads it, but it cannot be resumed; "
                            "use a new --out")
    diff = settings_diff(without(old, _RESUMABLE), without(settings, _RESUMABLE))
    if diff:
        raise JudgekitError(f"{out_dir} holds another evaluation ({'; '.join(diff)}); use a new --out")
    return True


# ------------------------------------------------------------------------------------------------- readers


def _read_shard(path: Path) -> pa.Table:
    """One shard at the current schema: kind, version and exact columns checked, page checksums verified."""
    meta = read_schema(path).metadata or {}
    version = meta.get(META_VERSION, b"").decode(errors="replace")
    if meta.get(META_KIND) != KIND.encode() or not version.isdigit() or int(version) not in READABLE:
        raise JudgekitError(f"{path}: not a judgekit eval shard of schema version {' or '.join(map(str, READABLE))}")
    expected = _SCHEMAS[int(version)]
    table = read_verified(path)
    stored = (table.schema.metadata or {}).get(META_DIGEST)
    if int(version) >= 3 and stored != content_digest(table).encode():
        raise JudgekitError(f"{path}: corrupt shard (its values do not match the digest written with them)")
    got = [(f.name, f.type) for f in table.schema]
    if got != [(f.name, f.type) for f in expected]:
        raise JudgekitError(f"{path}: corrupt shard (columns {', '.join(f'{n}: {t}' for n, t in got)} are not the "
                            f"records' columns)")
    if "judge_sha256" not in table.column_names:  # version 1: the judge's weights hash was not recorded
        table = table.add_column(expected.names.index("params") + 1, "judge_sha256",
                                 pa.nulls(table.num_rows, pa.string()))
    for name in ("prompt", "reference"):  # versions 1 and 2 did not keep them
        if name not in table.column_names:
            table = table.add_column(table.column_names.index("rank"), name, pa.nulls(table.num_rows, pa.string()))
    if "tree" not in table.column_names:  # before version 4 every point was a chain
        table = table.add_column(table.column_names.index("block_size") + 1, "tree",
                                 pa.nulls(table.num_rows, pa.string()))
    try:
        return table.cast(RECORD_SCHEMA)
    except (pa.ArrowException, ValueError) as err:
        raise JudgekitError(f"{path}: corrupt shard ({err})") from None


def _records(out_dir: Path) -> pa.Table:
    tables = [_read_shard(s.path) for s in list_rank_shards(out_dir, [PREFIX])]
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
    return table


def read_records(out_dir: str | Path, columns: list[str] | None = None) -> pa.Table:
    """All ranks' records merged, one row per (point, problem), in (rank, shard, row) order."""
    out_dir = Path(out_dir)
    _manifest(out_dir)
    unknown = [c for c in columns or [] if c not in RECORD_SCHEMA.names]
    if unknown:
        raise JudgekitError(f"unknown record column(s) {', '.join(unknown)}")
    table = _records(out_dir)
    return table.select(columns) if columns else table


def done_records(out_dir: str | Path) -> dict[tuple[str, str], str | None]:
    """(point, problem) -> judge_sha256 of every pair already recorded by any rank; empty for a new directory."""
    out_dir = Path(out_dir)
    if not (out_dir / MANIFEST).exists():
        return {}
    t = read_records(out_dir, ["point", "problem", "judge_sha256"])
    return dict(zip(zip(t.column("point").to_pylist(), t.column("problem").to_pylist()),
                    t.column("judge_sha256").to_pylist()))


# -------------------------------------------------------------------------------------------------- writer


class RecordWriter:
    """Appends one rank's records to an evaluation directory, creating or checking its manifest.

    Holds the directory's writer lock for its rank until :meth:`close`: a second process writing the same rank
    of the same directory is refused (DirectoryBusy) instead of overwriting this one's shards.
    """

    def __init__(self, out_dir: str | Path, settings: dict[str, Any], rank: int = 0) -> None:
        self.dir = Path(out_dir)
        self.rank = rank
        exists = check_eval_dir(self.dir, settings)  # before anything is written
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock: WriterLock | None = WriterLock(self.dir, rank, "eval")
        try:
            if not exists and not (self.dir / MANIFEST).exists():
                write_manifest(self.dir / MANIFEST, {"kind": KIND, "schema_version": SCHEMA_VERSION,
                                                     "settings": settings, "provenance": provenance(
                                                         (settings.get("target"), settings.get("draft")),
                                                         [settings.get("data_file")])}, rank)
            else:
                check_eval_dir(self.dir, settings)  # another rank may have created it meanwhile
            clean_temps(self.dir, rank)
            mine = [s.seq for s in list_rank_shards(self.dir, [PREFIX]) if s.rank == rank]
            self.seq = max(mine, default=-1) + 1
        except BaseException:
            self.close()
            raise

    def done(self) -> dict[tuple[str, str], str | None]:
        """(point, problem) -> judge_sha256 of the pairs already recorded by any rank."""
        return done_records(self.dir)

    def write(self, rows: list[dict[str, Any]]) -> None:
        if self._lock is None:
            raise ValueError("write after close")
        if not rows:
            return
        table = pa.Table.from_pylist([{**r, "rank": self.rank} for r in rows], schema=RECORD_SCHEMA)
        table = table.replace_schema_metadata({**table.schema.metadata, META_DIGEST: content_digest(table).encode()})
        atomic_write_table(self.dir / shard_name(PREFIX, self.rank, self.seq), table, self.rank)
        self.seq += 1

    def close(self) -> None:
        """Release the locks (idempotent); the records written are already durable."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
