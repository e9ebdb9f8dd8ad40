"""Atomic, durable file writes shared by the mined-data store, its compaction and evaluation records.

A file is written under a unique temporary name next to its destination, fsynced, renamed over the
destination, and the directory is fsynced: a reader (or a crash at any moment) sees the old file or the
whole new one, never part of one. The temporary name carries the writer's rank so that a restarted rank
cleans up only its own leftovers. :func:`parquet_options` is how judgekit writes every Parquet file.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq


def temp_path(path: Path, rank: int) -> Path:
    """Unique temp name next to `path`, tagged with the rank so only that rank's writer cleans it up."""
    return path.with_name(f"{path.name}.r{rank:03d}.{uuid.uuid4().hex[:12]}.tmp")


def fsync_dir(directory: Path) -> None:
    """Make a rename durable; some platforms cannot open directories, where this is best effort."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _atomic_write(path: Path, write: Callable[[Any], None], rank: int) -> None:
    """``write(file)`` into a temporary file, fsync, rename over ``path``, fsync the directory: readers see
    the old file or the whole new one, durably."""
    tmp = temp_path(path, rank)
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def atomic_write_bytes(path: Path, data: bytes, rank: int = 0) -> None:
    """Write ``data`` to ``path`` atomically and durably."""
    _atomic_write(path, lambda f: f.write(data), rank)


def parquet_options(schema: pa.Schema) -> dict[str, Any]:
    """How every store file is written: zstd, dictionary-coded strings, and page checksums that reads verify."""
    strings = [f.name for f in schema if pa.types.is_string(f.type)]
    return {"compression": "zstd", "use_dictionary": strings, "write_page_checksum": True}


def atomic_write_table(path: Path, table: pa.Table, rank: int = 0) -> None:
    """:func:`atomic_write_bytes` for a Parquet table, written with :func:`parquet_options`."""
    _atomic_write(path, lambda f: pq.write_table(table, f, **parquet_options(table.schema)), rank)
