"""The sharded-directory core under both judgekit stores (mined data, eval records; docs/design.md §7).

Both stores are a directory of Parquet shards written by one or more ranks next to a JSON manifest that
names the directory's kind, schema version and run settings. What they share lives here, once:

* **Directory kinds.** A directory says what it is by the file it holds: ``manifest.json`` (mined data),
  ``eval.json`` (evaluation records) or ``judge_config.json`` (a saved judge). :func:`require_kind` is how a
  command refuses another kind's directory before it writes anything.
* **Manifest.** :func:`read_manifest` / :func:`write_manifest` (atomic), :func:`settings_diff` to name the
  fields that differ between a directory's fingerprint and a new run's.
* **Shards.** ``{prefix}-r{rank:03d}-{seq:06d}.parquet``: :func:`shard_name`, :func:`list_rank_shards`; each
  rank numbers its own shards, so ranks never race for a name, and a restarted rank continues after its
  highest number. :func:`clean_temps` removes the temp files a killed write of one rank left behind.
* **Locks.** :class:`WriterLock`: the directory lock shared by every writer (a compaction takes it alone)
  plus an exclusive lock per rank, so a second process writing the same rank of a directory (two
  `judgekit eval` or `judgekit mine` runs into one ``--out``) is refused instead of overwriting shards.
* **Verified reads.** :func:`read_verified` reads a shard with its page checksums verified and turns every
  decoding failure into one :class:`JudgekitError` naming the file.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from judgekit.errors import JudgekitError
from judgekit.store.atomic import atomic_write_bytes

try:  # advisory locks; where the platform has none, the single-writer rule is the user's to keep
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

LOCK = ".judgekit.lock"
MINED, EVAL, JUDGE = "mined", "eval", "judge"
# The file by which each kind of directory is recognised (the judge's is judgekit.judge.head.CONFIG_NAME,
# named here so the store does not import the judge package).
KIND_FILES = {MINED: "manifest.json", EVAL: "eval.json", JUDGE: "judge_config.json"}
_KIND_WORDS = {MINED: "a mining directory (`judgekit mine`)", EVAL: "an evaluation directory (`judgekit eval`)",
               JUDGE: "a judge directory (`judgekit train`)"}
# What pyarrow raises on a damaged file: its own errors, OSError (checksums), and Python's own errors when a
# damaged footer decodes to invalid UTF-8 names or impossible values.
# Every shard's Parquet metadata names its schema version and what kind of rows it holds.
META_VERSION = b"judgekit.schema_version"
META_KIND = b"judgekit.kind"
DECODE_ERRORS = (pa.ArrowException, OSError, ValueError, KeyError, TypeError, IndexError)
_RANK_SHARD_RE = re.compile(r"^([a-z_]+)-r(\d{3,})-(\d{6,})\.parquet$")


# ----------------------------------------------------------------------------------------- directory kinds


def directory_kind(path: str | Path) -> str | None:
    """"mined", "eval" or "judge" by the marker file the directory holds; None for anything else."""
    path = Path(path)
    found = [kind for kind, name in KIND_FILES.items() if (path / name).is_file()]
    if len(found) > 1:
        raise JudgekitError(f"{path} holds the files of several kinds of directory "
                            f"({', '.join(KIND_FILES[k] for k in found)}); judgekit cannot tell what it is")
    return found[0] if found else None


def require_kind(path: str | Path, kind: str, *, must_exist: bool = False) -> None:
    """Refuse a directory of another kind (JudgekitError); an absent or unmarked one passes unless
    ``must_exist``, since a command's ``--out`` may be new. Reads only."""
    if kind not in KIND_FILES:
        raise ValueError(f"unknown directory kind {kind!r}")
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise JudgekitError(f"{path} is a file, not a directory")
    got = directory_kind(path) if path.is_dir() else None
    if got is None and must_exist:
        raise JudgekitError(f"{path} is not {_KIND_WORDS[kind]} (no {KIND_FILES[kind]})")
    if got is not None and got != kind:
        raise JudgekitError(f"{path} is {_KIND_WORDS[got]}, not {_KIND_WORDS[kind]}; use another directory")


# ------------------------------------------------------------------------------------------------ manifest


def read_manifest(path: Path) -> dict[str, Any]:
    """The JSON object of a manifest file, or one JudgekitError naming it."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise JudgekitError(f"{path}: invalid manifest ({type(err).__name__}: {err})") from None
    if not isinstance(doc, dict):
        raise JudgekitError(f"{path}: invalid manifest (not a JSON object)")
    return doc


def write_manifest(path: Path, doc: dict[str, Any], rank: int) -> None:
    """Atomically; several ranks may race to create it with identical content."""
    atomic_write_bytes(path, (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode(), rank)


def without(settings: dict[str, Any], resumable: Iterable[str]) -> dict[str, Any]:
    """The fingerprint: settings minus those that may change on resume (such as ``limit``)."""
    skip = set(resumable)
    return {k: v for k, v in settings.items() if k not in skip}


def settings_diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Human-readable differences, one per field, e.g. "target 'a', not 'b'" (old first)."""
    return [f"{k} {old.get(k)!r}, not {new.get(k)!r}" for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]


def file_sha256(path: str | Path) -> str:
    """Hex sha256 of a file's content (an input's identity: its path may stay while its content changes). A
    directory (e.g. BFCL's data layout) hashes its files' relative paths and contents, in sorted order."""
    path = Path(path)
    h = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    try:
        for file in files:
            if path.is_dir():
                h.update(str(file.relative_to(path)).encode() + b"\0")
            with open(file, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
    except OSError as err:
        raise JudgekitError(f"cannot read {path}: {err.strerror or err}") from None
    return h.hexdigest()


# -------------------------------------------------------------------------------------------------- shards


def shard_name(prefix: str, rank: int, seq: int) -> str:
    return f"{prefix}-r{rank:03d}-{seq:06d}.parquet"


@dataclass(frozen=True)
class RankShard:
    """One rank's shard file: ``{prefix}-r{rank}-{seq}.parquet``."""

    prefix: str
    rank: int
    seq: int
    path: Path


def list_rank_shards(out_dir: str | Path, prefixes: Sequence[str]) -> list[RankShard]:
    """Every rank shard of the given prefixes, by (prefix, rank, seq); an absent directory has none."""
    out_dir = Path(out_dir)
    found = []
    for path in out_dir.iterdir() if out_dir.is_dir() else ():
        m = _RANK_SHARD_RE.match(path.name)
        if m and m.group(1) in prefixes and path.is_file():
            found.append(RankShard(m.group(1), int(m.group(2)), int(m.group(3)), path))
    return sorted(found, key=lambda s: (s.prefix, s.rank, s.seq))


def clean_temps(out_dir: Path, rank: int) -> None:
    """Remove the temp files of this rank's killed writes (judgekit.store.atomic tags them with the rank)."""
    for tmp in out_dir.glob(f"*.r{rank:03d}.*.tmp"):
        tmp.unlink(missing_ok=True)


# --------------------------------------------------------------------------------------------------- locks


class DirectoryBusy(JudgekitError):
    """The directory (or one rank of it) is locked by another writer."""


def _flock(path: Path, exclusive: bool, blocking: bool, busy: str):
    """An open file holding an flock on ``path``, or None where locks are unavailable; DirectoryBusy if taken.

    flock locks die with their process, so a writer killed with SIGKILL never leaves the directory locked.
    """
    if fcntl is None:
        return None
    try:
        f = open(path, "a+b")
    except OSError:  # e.g. a read-only copy: nothing can write there either
        return None
    try:
        flags = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | (0 if blocking else fcntl.LOCK_NB)
        fcntl.flock(f.fileno(), flags)
    except BlockingIOError:
        f.close()
        raise DirectoryBusy(busy) from None
    except OSError:  # a filesystem without flock: proceed unlocked
        f.close()
        return None
    return f


class DirLock:
    """The directory lock: writers share it, compaction takes it alone (``exclusive``)."""

    def __init__(self, out_dir: Path, *, exclusive: bool, blocking: bool) -> None:
        self._file = _flock(Path(out_dir) / LOCK, exclusive, blocking,
                            f"{out_dir} is still being written (a `judgekit mine` holds it); "
                            "try again when the run has finished")

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing the descriptor releases the lock
            self._file = None

    def __enter__(self) -> DirLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class WriterLock:
    """What a writer of one rank holds while it writes: the shared directory lock and its rank's own lock.

    Shard sequence numbers are per rank, so two processes writing the same rank would overwrite each other's
    shards; the rank lock refuses the second one (DirectoryBusy) instead. Take it before reading the
    directory's done-set, so that set cannot go stale under a concurrent writer of the same rank.
    """

    def __init__(self, out_dir: Path, rank: int, command: str) -> None:
        self._dir = DirLock(out_dir, exclusive=False, blocking=True)
        try:
            self._rank = _flock(Path(out_dir) / f".judgekit.r{rank:03d}.lock", True, False,
                                f"{out_dir}: rank {rank} is being written by another `judgekit {command}` "
                                "(one run per --out and rank); wait for it to finish or use another --out")
        except BaseException:
            self._dir.release()
            raise

    def release(self) -> None:
        if self._rank is not None:
            self._rank.close()
            self._rank = None
        self._dir.release()


# ---------------------------------------------------------------------------------------------- verified reads


def read_error(path: Path, err: Exception) -> JudgekitError:
    """One error naming the file, saying whether a checksum caught it."""
    what = "corrupt data (checksum mismatch)" if "CRC" in str(err) or "checksum" in str(err) else "not a valid Parquet file"
    return JudgekitError(f"{path}: {what} ({err})")


def read_schema(path: Path) -> pa.Schema:
    """A shard's footer schema, or JudgekitError naming the file."""
    try:
        return pq.read_schema(path)
    except DECODE_ERRORS as err:
        raise JudgekitError(f"{path}: not a valid Parquet file ({err})") from err


def read_verified(path: Path, columns: list[str] | None = None) -> pa.Table:
    """A whole shard with every page checksum verified; any failure is one JudgekitError naming the file."""
    try:  # ParquetFile rather than read_table: no dataset machinery, several times faster on small shards
        with pq.ParquetFile(path, page_checksum_verification=True) as pf:
            return pf.read(columns=columns)
    except DECODE_ERRORS as err:
        raise read_error(path, err) from err
