"""Compaction of a mining directory (docs/design.md §7): many small commits -> few large files, atomically.

Writers commit every few problems, which keeps a crash cheap but leaves thousands of tiny files on a large
run. Compaction rewrites every committed row into a few mismatch files with large row groups and one
problems file, and keeps the store's guarantees:

* **Refused while the run is written.** It takes the directory lock exclusively (writers hold it shared).
* **Nothing lost, nothing duplicated, at any kill.** The parts are written first (temp file, fsync,
  rename); then the marker ``problems-c{gen}.parquet``, whose metadata names every part with its row count
  and every commit it replaces. Before the marker exists readers ignore the parts; from the moment it exists
  they ignore the replaced commits, whose files are deleted only afterwards. The next writer or
  compaction removes whatever a crash left behind.
* **Checked both ways.** The input is validated in full (page checksums included) before anything is
  written, and the parts' row counts are checked against the input before the marker is written. The
  outputs carry page checksums like every store file.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from judgekit.store.atomic import atomic_write_table, fsync_dir, parquet_options, temp_path
from judgekit.errors import JudgekitError
from judgekit.store.mined import (
    META_COMPACT,
    META_SESSION,
    MISMATCHES,
    PROBLEMS,
    DirLock,
    _json_meta,
    _mismatch_shards,
    _read_shard,
    compact_name,
    iter_shard,
    load_settings,
    mismatch_schema,
    problem_schema,
    scan,
    validate_dir,
)

ROW_GROUP_BYTES = 64 * 2**20  # ~64 MiB of decoded rows per row group: large scans, useful statistics
FILE_BYTES = 1024 * 2**20  # start a new mismatch part after ~1 GiB of decoded rows
_COMPACTOR_RANK = 999  # temp-file tag of the compactor (no writer runs while it holds the lock)


@dataclass
class CompactResult:
    commits: int  # commits rewritten (0: nothing to do)
    files_before: int
    files_after: int
    mismatches: int
    problems: int
    seconds: float


def _data_files(out_dir: Path) -> int:
    from judgekit.store.mined import list_shards

    return len(list_shards(out_dir))


class _PartWriter:
    """Streams mismatch row groups into numbered part files of about ``file_bytes`` each."""

    def __init__(self, out_dir: Path, gen: int, schema: pa.Schema, row_group_bytes: int, file_bytes: int):
        self.out_dir, self.gen, self.schema = out_dir, gen, schema
        self.row_group_bytes, self.file_bytes = row_group_bytes, file_bytes
        self.parts: list[tuple[str, int]] = []  # (file name, rows), closed parts
        self._buf: list[pa.Table] = []
        self._buf_bytes = 0
        self._writer: pq.ParquetWriter | None = None
        self._file = None
        self._tmp: Path | None = None
        self._part_bytes = 0
        self._part_rows = 0

    def add(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        self._buf.append(table)
        self._buf_bytes += table.nbytes
        if self._buf_bytes >= self.row_group_bytes:
            self._flush_group()

    def _flush_group(self) -> None:
        if not self._buf:
            return
        table = pa.concat_tables(self._buf).combine_chunks()
        self._buf, self._buf_bytes = [], 0
        if self._writer is None:
            name = compact_name(MISMATCHES, self.gen, len(self.parts))
            self._tmp = temp_path(self.out_dir / name, _COMPACTOR_RANK)
            self._file = open(self._tmp, "wb")
            self._writer = pq.ParquetWriter(self._file, self.schema, **parquet_options(self.schema))
        self._writer.write_table(table, row_group_size=table.num_rows)
        self._part_bytes += table.nbytes
        self._part_rows += table.num_rows
        if self._part_bytes >= self.file_bytes:
            self._close_part()

    def _close_part(self) -> None:
        assert self._writer is not None and self._file is not None and self._tmp is not None
        self._writer.close()
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        name = compact_name(MISMATCHES, self.gen, len(self.parts))
        os.replace(self._tmp, self.out_dir / name)
        self.parts.append((name, self._part_rows))
        self._writer = self._file = self._tmp = None
        self._part_bytes = self._part_rows = 0

    def finish(self) -> list[tuple[str, int]]:
        self._flush_group()
        if self._writer is not None:
            self._close_part()
        fsync_dir(self.out_dir)
        return self.parts

    def abort(self) -> None:
        if self._file is not None:
            self._file.close()
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)


def _sessions(commits) -> tuple[dict[str, Any], bool]:
    """Timing records of the replaced commits, merged (a session's latest commit has its longest time)."""
    merged: dict[str, Any] = {}
    timed = True
    for c in commits:
        if c.marker.rank < 0:
            found, timed = c.info.get("sessions") or {}, timed and bool(c.info.get("timed", False))
        else:
            one = _json_meta(c.marker.path, META_SESSION)
            found, timed = ({one["id"]: one} if one else {}), timed and one is not None
        for sid, s in found.items():
            if sid not in merged or s["elapsed"] > merged[sid]["elapsed"]:
                merged[sid] = {"rank": s["rank"], "elapsed": s["elapsed"]}
    return merged, timed


def compact_dir(out_dir: str | Path, *, row_group_bytes: int = ROW_GROUP_BYTES, file_bytes: int = FILE_BYTES,
                in_run: bool = False) -> CompactResult:
    """Rewrite every committed row of `out_dir` into few files; refused while a writer holds the directory.

    ``in_run``: the compaction that ends a `judgekit mine` run, whose time counts in the run's wall time.
    """
    start = time.monotonic()
    out_dir = Path(out_dir)
    load_settings(out_dir)  # not a mining directory: refused before the lock file is created
    with DirLock(out_dir, exclusive=True, blocking=False):
        settings = validate_dir(out_dir)
        _remove_leftovers(out_dir)
        layout = scan(out_dir)
        before = _data_files(out_dir)
        commits = layout.commits
        if len(commits) <= 1:
            return CompactResult(0, before, before, 0, 0, time.monotonic() - start)
        gen = layout.max_gen + 1
        parts = _PartWriter(out_dir, gen, mismatch_schema(settings), row_group_bytes, file_bytes)
        n_mismatches = 0
        try:
            for commit in commits:
                for shard in _mismatch_shards(commit):
                    for table in iter_shard(shard, settings):
                        n_mismatches += table.num_rows
                        parts.add(table)
            written = parts.finish()
        except BaseException:
            parts.abort()
            raise
        for name, rows in written:  # the footers on disk must agree with what was streamed in
            if pq.read_metadata(out_dir / name).num_rows != rows:
                raise JudgekitError(f"{out_dir / name}: row count differs from what was written; not compacted")
        if sum(rows for _n, rows in written) != n_mismatches:
            raise JudgekitError(f"{out_dir}: compacted parts hold {sum(r for _n, r in written)} mismatch rows, "
                                f"the input {n_mismatches}; not compacted")
        schema = problem_schema(settings)
        probs = pa.concat_tables([_read_shard(c.marker, settings) for c in commits]).cast(schema)
        sessions, timed = _sessions(commits)
        seconds = time.monotonic() - start
        run_s = sum(float(c.info.get("run_compact_s", 0.0)) for c in commits) + (seconds if in_run else 0.0)
        info = {"parts": [[n, r] for n, r in written], "replaces": [c.unit for c in commits],
                "sessions": sessions, "timed": timed, "compact_s": round(seconds, 3),
                "run_compact_s": round(run_s, 3)}
        probs = probs.replace_schema_metadata({**schema.metadata, META_COMPACT: json.dumps(info).encode()})
        marker = out_dir / compact_name(PROBLEMS, gen)
        atomic_write_table(marker, probs, _COMPACTOR_RANK)  # the commit point of the compaction
        _remove_leftovers(out_dir)  # the replaced commits, now obsolete
        return CompactResult(len(commits), before, _data_files(out_dir), n_mismatches, probs.num_rows,
                             time.monotonic() - start)


def _remove_leftovers(out_dir: Path) -> None:
    """Delete files no reader reads: uncommitted or replaced shards and every temp file (we hold the lock).

    Mismatch files go before their markers so that a crash here never leaves a marker without its data.
    """
    for tmp in out_dir.glob("*.tmp"):
        tmp.unlink(missing_ok=True)
    leftovers = scan(out_dir).leftovers
    for shard in sorted(leftovers, key=lambda s: s.kind != MISMATCHES):
        shard.path.unlink(missing_ok=True)
    fsync_dir(out_dir)
