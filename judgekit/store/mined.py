"""On-disk store for mined mismatches (docs/design.md §3, §7): sharded Parquet with a manifest and commit markers.

Layout of a mining directory::

    manifest.json                              schema version + the run's settings (one run per directory)
    mismatches-r{rank:03d}-{seq:06d}.parquet   one writer commit: one row per mismatch, with features
    problems-r{rank:03d}-{seq:06d}.parquet     ... and one row per completed problem (the commit marker)
    mismatches-c{gen:06d}-p{part:03d}.parquet  one compaction: few large mismatch files
    problems-c{gen:06d}.parquet                ... and all their problem rows (the compaction's marker)
    .judgekit.lock                             writers hold it shared, compaction exclusively

Each commit of a rank writes the mismatch shard first and the problems shard second, both atomically
(unique temp file, fsync, rename, fsync of the directory). A problems shard therefore only ever exists
when its mismatch shard is complete, so readers treat it as the commit marker and ignore a mismatch
shard without one: a crash at any moment loses at most the commit in flight and never duplicates a
problem on resume. Compaction (:mod:`judgekit.store.compact`) follows the same rule: it writes its
mismatch parts, then its marker, whose metadata names the commits it replaces; from the moment the marker
exists readers ignore those commits (even before they are deleted), and before it exists they ignore the
parts. Every file carries the schema version and the run fingerprint in its Parquet metadata, so a shard
copied in from another run is detected instead of silently mixed in, and Parquet page checksums (CRC32)
that every read verifies, so a flipped byte is an error naming the file, never an altered value.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from judgekit.store.atomic import atomic_write_table, fsync_dir
from judgekit.errors import JudgekitError
from judgekit.store.shards import (  # noqa: F401 - DirLock, DirectoryBusy, LOCK, shard_name: re-exported
    DECODE_ERRORS,
    KIND_FILES,
    LOCK,
    META_KIND,
    META_VERSION,
    MINED,
    DirectoryBusy,
    DirLock,
    WriterLock,
    clean_temps,
    list_rank_shards,
    read_error,
    read_manifest,
    read_schema,
    read_verified,
    require_kind,
    settings_diff,
    shard_name,
    without,
    write_manifest,
)
from judgekit.provenance import provenance

SCHEMA_VERSION = 1
MANIFEST = KIND_FILES[MINED]
MISMATCHES = "mismatches"
PROBLEMS = "problems"
META_RUN = b"judgekit.run"
META_SESSION = b"judgekit.session"  # writer commits: {"id", "rank", "elapsed"} (seconds since the run started)
META_COMPACT = b"judgekit.compact"  # compaction markers: {"parts", "replaces", "sessions", "compact_s"}
DRAFT_COLUMN = "draft_hidden"

_COMPACT_RE = re.compile(r"^(mismatches|problems)-c(\d{6,})(?:-p(\d{3,}))?\.parquet$")
_UNIT_RE = re.compile(r"^r(\d{3,})-(\d{6,})$")
# Settings that may change between a run and its resumption without changing what the rows mean.
_RESUMABLE_FIELDS = frozenset({"limit"})


# ----------------------------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class RunSettings:
    """Fingerprint of a mining run: everything that changes what a mined row means (one run per directory)."""

    task: str
    target: str
    draft: str
    split: str
    data_file: str | None
    max_new_tokens: int
    layers: tuple[int, ...]
    draft_features: bool
    hidden_size: int
    draft_hidden_size: int | None
    limit: int | None

    def __post_init__(self) -> None:
        # Accept any sequence for layers (JSON gives lists) but keep the dataclass hashable and comparable.
        object.__setattr__(self, "layers", tuple(int(x) for x in self.layers))
        if not self.layers:
            raise JudgekitError("at least one feature layer is required")
        if len(set(self.layers)) != len(self.layers):
            raise JudgekitError(f"feature layers repeat: {list(self.layers)}")
        if self.hidden_size <= 0:
            raise JudgekitError(f"hidden_size must be positive, got {self.hidden_size}")
        if self.draft_features and (self.draft_hidden_size is None or self.draft_hidden_size <= 0):
            raise JudgekitError("draft_features needs a positive draft_hidden_size")

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["layers"] = list(self.layers)
        return d

    @staticmethod
    def from_dict(d: dict[str, Any]) -> RunSettings:
        """Inverse of to_dict; names missing or unknown fields so a hand-edited manifest fails clearly."""
        names = [f.name for f in dataclasses.fields(RunSettings)]
        missing = [n for n in names if n not in d]
        unknown = sorted(set(d) - set(names))
        if missing or unknown:
            parts = ([f"missing {', '.join(missing)}"] if missing else []) + (
                [f"unknown {', '.join(unknown)}"] if unknown else [])
            raise JudgekitError(f"invalid run settings ({'; '.join(parts)})")
        try:
            return RunSettings(**{n: d[n] for n in names})
        except (TypeError, ValueError) as err:
            raise JudgekitError(f"invalid run settings ({err})") from err

    def fingerprint(self) -> dict[str, Any]:
        """The settings that must agree between shards of one directory (`limit` may grow on resume)."""
        return _without_resumable(self.to_dict())

    def fingerprint_json(self) -> str:
        return json.dumps(self.fingerprint(), sort_keys=True)


def _without_resumable(d: dict[str, Any]) -> dict[str, Any]:
    return without(d, _RESUMABLE_FIELDS)


# ------------------------------------------------------------------------------------------------- schemas


def feature_columns(settings: RunSettings) -> dict[str, int]:
    """Feature column name -> vector size, in table order."""
    cols = {f"hidden_l{layer}": settings.hidden_size for layer in settings.layers}
    if settings.draft_features:
        assert settings.draft_hidden_size is not None
        cols[DRAFT_COLUMN] = settings.draft_hidden_size
    return cols


def _metadata(settings: RunSettings, kind: str) -> dict[bytes, bytes]:
    return {META_VERSION: str(SCHEMA_VERSION).encode(), META_KIND: kind.encode(),
            META_RUN: settings.fingerprint_json().encode()}


def mismatch_schema(settings: RunSettings) -> pa.Schema:
    """One row per mismatch: context, both tokens, label, outcomes and the requested hidden states."""
    fields = [
        pa.field("task", pa.string()),
        pa.field("problem_id", pa.string()),
        pa.field("position", pa.int32()),
        pa.field("prompt_len", pa.int32()),
        pa.field("context_ids", pa.list_(pa.int32())),
        pa.field("draft_token", pa.int32()),
        pa.field("target_token", pa.int32()),
        pa.field("important", pa.bool_()),
        pa.field("target_outcome", pa.string()),
        pa.field("alt_outcome", pa.string()),
        pa.field("target_correct", pa.bool_()),
        pa.field("rollout", pa.int32()),
    ]
    fields += [pa.field(name, pa.list_(pa.float16(), size)) for name, size in feature_columns(settings).items()]
    return pa.schema(fields, metadata=_metadata(settings, MISMATCHES))


def problem_schema(settings: RunSettings | None = None) -> pa.Schema:
    """One row per completed problem; with settings, carries the run's metadata as written to disk."""
    fields = [
        pa.field("task", pa.string()),
        pa.field("problem_id", pa.string()),
        pa.field("response", pa.string()),
        pa.field("response_ids", pa.list_(pa.int32())),
        pa.field("n_rollouts", pa.int32()),
        pa.field("n_mismatches", pa.int32()),
        pa.field("n_important", pa.int32()),
        pa.field("target_outcome", pa.string()),
        pa.field("target_correct", pa.bool_()),
        pa.field("wall_time", pa.float64()),
        pa.field("rank", pa.int32()),
    ]
    return pa.schema(fields, metadata=_metadata(settings, PROBLEMS) if settings else None)


def _schema_for(kind: str, settings: RunSettings) -> pa.Schema:
    return mismatch_schema(settings) if kind == MISMATCHES else problem_schema(settings)


# ----------------------------------------------------------------------------------------- rows -> table


def _int_lists(values: Sequence[Any]) -> pa.Array:
    """list<int32> from lists/arrays of token ids via one flat buffer (no per-element Python objects)."""
    parts = [np.asarray(v, dtype=np.int32).reshape(-1) for v in values]
    offsets = np.zeros(len(parts) + 1, dtype=np.int32)
    np.cumsum([len(p) for p in parts], out=offsets[1:])
    flat = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat, type=pa.int32()))


def _features(name: str, values: Sequence[Any], size: int) -> pa.Array:
    """fixed_size_list<float16>[size] from 1-D float16/float32 vectors via one flat float16 buffer."""
    mat = np.zeros((len(values), size), dtype=np.float16)
    for i, v in enumerate(values):
        vec = np.asarray(v).reshape(-1)
        if vec.shape[0] != size:
            raise JudgekitError(f"{name} has {vec.shape[0]} values in row {i}, expected {size} (hidden size)")
        mat[i] = vec  # float32 -> float16 rounds here; float16 is copied bit-exactly
    return pa.FixedSizeListArray.from_arrays(pa.array(mat.reshape(-1), type=pa.float16()), size)


def rows_to_table(rows: Sequence[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    """Build a table with exactly `schema`'s columns; a missing or unexpected key is a caller bug."""
    names = schema.names
    for i, row in enumerate(rows):
        missing = [n for n in names if n not in row]
        extra = sorted(set(row) - set(names))
        if missing or extra:
            raise ValueError(f"row {i}: missing columns {missing}, unexpected columns {extra}")
    arrays = []
    for field in schema:
        values = [row[field.name] for row in rows]
        if pa.types.is_fixed_size_list(field.type):
            arrays.append(_features(field.name, values, field.type.list_size))
        elif pa.types.is_list(field.type):
            arrays.append(_int_lists(values))
        else:
            arrays.append(pa.array(values, type=field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def features_to_numpy(table: pa.Table, column: str) -> np.ndarray:
    """(rows, size) float16 matrix of a feature column, without going through Python lists."""
    col = table.column(column)
    size = col.type.list_size
    if col.num_chunks == 0 or len(col) == 0:
        return np.zeros((0, size), dtype=np.float16)
    flat = col.combine_chunks().flatten()  # respects slice offsets
    return flat.to_numpy(zero_copy_only=False).reshape(-1, size)


# ------------------------------------------------------------------------------------------ file helpers


def compact_name(kind: str, gen: int, part: int | None = None) -> str:
    return f"{kind}-c{gen:06d}.parquet" if part is None else f"{kind}-c{gen:06d}-p{part:03d}.parquet"


@dataclass(frozen=True)
class Shard:
    """One data file. Writer shards have rank >= 0; compaction files have rank -1, seq = generation."""

    kind: str
    rank: int
    seq: int
    path: Path
    part: int | None = None

    @property
    def unit(self) -> str:
        """The commit this file belongs to: "r000-000001" (a writer commit) or "c000001" (a compaction)."""
        return f"c{self.seq:06d}" if self.rank < 0 else f"r{self.rank:03d}-{self.seq:06d}"


def list_shards(out_dir: Path) -> list[Shard]:
    """Every data file by name (committed or not): writer shards by kind, rank, seq, then compaction files."""
    shards = [Shard(s.prefix, s.rank, s.seq, s.path) for s in list_rank_shards(out_dir, (MISMATCHES, PROBLEMS))]
    for p in Path(out_dir).iterdir():
        m = _COMPACT_RE.match(p.name)
        if m and p.is_file() and (m.group(1) == MISMATCHES) == (m.group(3) is not None):
            shards.append(Shard(m.group(1), -1, int(m.group(2)), p, None if m.group(3) is None else int(m.group(3))))
    return sorted(shards, key=lambda s: (s.kind, s.rank < 0, s.rank, s.seq, s.part or 0))


def _writer_pairs(shards: Iterable[Shard]) -> tuple[list[tuple[Shard | None, Shard]], list[Shard]]:
    """Writer shards only: (mismatch shard or None, problems shard) per commit, and the orphaned mismatch shards.

    A problems shard is the commit marker, so its commit counts even if the mismatch shard was lost
    (validate_dir reports that); a mismatch shard without one is a crash between the two writes.
    """
    shards = [s for s in shards if s.rank >= 0]
    mism = {(s.rank, s.seq): s for s in shards if s.kind == MISMATCHES}
    probs = {(s.rank, s.seq): s for s in shards if s.kind == PROBLEMS}
    pairs = [(mism.get(key), probs[key]) for key in sorted(probs)]
    orphans = [mism[key] for key in sorted(mism) if key not in probs]
    return pairs, orphans


def committed_pairs(shards: Iterable[Shard]) -> tuple[list[tuple[Shard | None, Shard]], list[Shard]]:
    """(mismatch file or None if lost, its commit marker) for every mismatch file to read, in read order,
    and the files never read (uncommitted, or replaced by a compaction).

    A compaction with several parts gives one pair per part, all with the same marker, so a caller that
    reads each pair's mismatch file (as `read_mismatches` does) reads every committed row exactly once.
    """
    layout = _layout(list(shards))
    pairs = [(s if s.rank < 0 or s.path.exists() else None, c.marker)
             for c in layout.commits for s in _mismatch_shards(c)]
    return pairs, layout.leftovers


@dataclass(frozen=True)
class Commit:
    """A committed unit that readers read: a writer commit or a compaction, with its marker (problems file)."""

    unit: str
    marker: Shard
    mismatches: tuple[Path, ...]  # the mismatch files it needs (validate_dir names a missing one)
    part_rows: tuple[int, ...] | None = None  # rows per mismatch part, recorded by a compaction
    replaces: tuple[str, ...] = ()
    info: dict[str, Any] = field(default_factory=dict, compare=False)  # the marker's session / compaction record


@dataclass
class Layout:
    """What a directory holds: the commits to read (in read order) and files that are never read."""

    commits: list[Commit]
    leftovers: list[Shard]  # uncommitted mismatch files, and files of commits replaced by a compaction
    high_water: dict[int, int]  # rank -> largest seq on disk or named by a compaction (never reused)
    max_gen: int


def _json_meta(path: Path, key: bytes) -> dict[str, Any] | None:
    meta = read_schema(path).metadata or {}
    if key not in meta:
        return None
    try:
        value = json.loads(meta[key])
        if not isinstance(value, dict):
            raise ValueError("not an object")
    except ValueError as err:
        raise JudgekitError(f"{path}: unreadable {key.decode()} metadata ({err})") from err
    return value


def scan(out_dir: str | Path) -> Layout:
    """Commits to read and leftovers, from file names and the compaction markers' footers (cheap)."""
    return _layout(list_shards(Path(out_dir)))


def _layout(shards: list[Shard]) -> Layout:
    pairs, orphans = _writer_pairs(shards)
    commits: list[Commit] = []
    high: dict[int, int] = {}
    for s in shards:
        if s.rank >= 0:
            high[s.rank] = max(high.get(s.rank, 0), s.seq)
    parts: dict[int, dict[int, Shard]] = {}
    for s in shards:
        if s.rank < 0 and s.kind == MISMATCHES:
            parts.setdefault(s.seq, {})[s.part or 0] = s
    markers = [s for s in shards if s.rank < 0 and s.kind == PROBLEMS]
    leftovers: list[Shard] = list(orphans)
    for marker in markers:
        info = _json_meta(marker.path, META_COMPACT)
        if info is None:
            raise JudgekitError(f"{marker.path}: compaction marker without {META_COMPACT.decode()} metadata")
        try:
            names = [str(n) for n, _rows in info["parts"]]
            rows = tuple(int(r) for _n, r in info["parts"])
            replaces = tuple(str(u) for u in info["replaces"])
        except (KeyError, TypeError, ValueError) as err:
            raise JudgekitError(f"{marker.path}: invalid {META_COMPACT.decode()} metadata ({err!r})") from err
        for unit in replaces:
            m = _UNIT_RE.match(unit)
            if m:
                high[int(m.group(1))] = max(high.get(int(m.group(1)), 0), int(m.group(2)))
        commits.append(Commit(marker.unit, marker, tuple(marker.path.parent / n for n in names), rows, replaces, info))
    leftovers += [p for gen, ps in sorted(parts.items()) if gen not in {m.seq for m in markers} for p in ps.values()]
    commits += [Commit(p.unit, p, (p.path.with_name(shard_name(MISMATCHES, p.rank, p.seq)),)) for _m, p in pairs]
    # A compaction's marker makes the commits it names obsolete at once, even while their files still exist
    # (a crash between the marker's rename and their deletion); deletion is only housekeeping.
    replaced = {u for c in commits for u in c.replaces}
    kept = [c for c in commits if c.unit not in replaced]
    for c in commits:
        if c.unit in replaced:
            leftovers.append(c.marker)
            leftovers += [s for s in shards if s.kind == MISMATCHES and s.unit == c.unit]
    max_gen = max((m.seq for m in markers), default=0)
    max_gen = max([max_gen] + list(parts))
    return Layout(kept, leftovers, high, max_gen)


# --------------------------------------------------------------------------------------------- manifest


def _read_manifest(out_dir: Path) -> tuple[int, dict[str, Any]]:
    """(schema_version, settings dict) of a directory's manifest, or JudgekitError naming the file."""
    path = out_dir / MANIFEST
    if not out_dir.is_dir():
        raise JudgekitError(f"{out_dir}: no such directory")
    if not path.is_file():
        raise JudgekitError(f"{path}: missing manifest (not a judgekit mining directory?)")
    doc = read_manifest(path)
    try:
        version, settings = doc["schema_version"], doc["settings"]
        if not isinstance(version, int) or not isinstance(settings, dict):
            raise TypeError("schema_version must be an int and settings an object")
    except (KeyError, TypeError) as err:
        raise JudgekitError(f"{path}: invalid manifest ({type(err).__name__}: {err})") from err
    return version, settings


def load_settings(out_dir: str | Path) -> RunSettings:
    """The directory's run settings, after checking the manifest's schema version."""
    out_dir = Path(out_dir)
    version, settings = _read_manifest(out_dir)
    if version != SCHEMA_VERSION:
        raise JudgekitError(f"{out_dir / MANIFEST}: schema version {version}; this judgekit reads {SCHEMA_VERSION}")
    try:
        return RunSettings.from_dict(settings)
    except JudgekitError as err:
        raise JudgekitError(f"{out_dir / MANIFEST}: {err}") from err


def check_compatible(out_dir: str | Path, settings: RunSettings) -> bool:
    """Refuse (JudgekitError) a directory mined with other settings; True if it holds a manifest.

    Reads only: a refused command must leave the directory exactly as it found it.
    """
    out_dir = Path(out_dir)
    require_kind(out_dir, MINED)
    if not (out_dir / MANIFEST).exists():
        return False
    version, old = _read_manifest(out_dir)
    if version != SCHEMA_VERSION:
        raise JudgekitError(f"{out_dir} was mined with store schema version {version}, not "
                            f"{SCHEMA_VERSION} (use another --out)")
    diff = settings_diff(_without_resumable(old), settings.fingerprint())
    if diff:
        raise JudgekitError(f"{out_dir} was mined with {'; '.join(diff)} (use another --out)")
    return True


# ---------------------------------------------------------------------------------------- shard checks


def _check_shard(shard: Shard, settings: RunSettings) -> pa.Schema:
    """Footer, metadata and columns of one shard; JudgekitError naming the file on any problem."""
    schema = read_schema(shard.path)
    meta = schema.metadata or {}
    if META_VERSION not in meta or META_RUN not in meta:
        raise JudgekitError(f"{shard.path}: not a judgekit shard (no judgekit schema metadata)")
    version = meta[META_VERSION].decode(errors="replace")
    if version != str(SCHEMA_VERSION):
        raise JudgekitError(f"{shard.path}: schema version {version}, expected {SCHEMA_VERSION} (foreign shard)")
    if meta.get(META_KIND, b"").decode(errors="replace") != shard.kind:
        raise JudgekitError(f"{shard.path}: holds {meta.get(META_KIND, b'?').decode(errors='replace')} rows, "
                            f"not {shard.kind} (foreign shard)")
    try:
        run = json.loads(meta[META_RUN])
    except ValueError as err:
        raise JudgekitError(f"{shard.path}: unreadable run metadata ({err})") from err
    expected_run = settings.fingerprint()
    if run != expected_run:
        diff = "; ".join(settings_diff(run, expected_run))
        raise JudgekitError(f"{shard.path}: from another mining run (mined with {diff}) (foreign shard)")
    expected = _schema_for(shard.kind, settings)
    got = [(f.name, f.type) for f in schema]
    want = [(f.name, f.type) for f in expected]
    if got != want:
        raise JudgekitError(f"{shard.path}: wrong columns {_describe(got)}, expected {_describe(want)}")
    return expected


def _describe(cols: list[tuple[str, pa.DataType]]) -> str:
    return "[" + ", ".join(f"{n}: {t}" for n, t in cols) + "]"


def iter_shard(shard: Shard, settings: RunSettings, columns: list[str] | None = None) -> Iterator[pa.Table]:
    """A shard's row groups one at a time (bounded memory), checked and with page checksums verified."""
    expected = _check_shard(shard, settings)
    try:
        pf = pq.ParquetFile(shard.path, page_checksum_verification=True)
        for i in range(pf.num_row_groups):
            table = pf.read_row_group(i, columns=columns)
            target = pa.schema([expected.field(n) for n in table.column_names], metadata=expected.metadata)
            yield table.cast(target)
    except DECODE_ERRORS as err:
        raise read_error(shard.path, err) from err


def _read_shard(shard: Shard, settings: RunSettings, columns: list[str] | None = None) -> pa.Table:
    expected = _check_shard(shard, settings)
    table = read_verified(shard.path, columns)
    target = pa.schema([expected.field(n) for n in table.column_names], metadata=expected.metadata)
    return table.cast(target)


def _concat(tables: list[pa.Table], schema: pa.Schema, columns: list[str] | None) -> pa.Table:
    if columns is not None:
        schema = pa.schema([schema.field(n) for n in columns], metadata=schema.metadata)
    if not tables:
        return schema.empty_table()
    return pa.concat_tables(tables)


def _check_columns(columns: Sequence[str] | None, schema: pa.Schema) -> list[str] | None:
    if columns is None:
        return None
    unknown = [c for c in columns if c not in schema.names]
    if unknown:
        raise JudgekitError(f"unknown column(s) {', '.join(unknown)}; columns are: {', '.join(schema.names)}")
    return list(columns)


def _mismatch_shards(commit: Commit) -> list[Shard]:
    compact = commit.marker.rank < 0
    return [Shard(MISMATCHES, commit.marker.rank, commit.marker.seq, p, i if compact else None)
            for i, p in enumerate(commit.mismatches)]


# ------------------------------------------------------------------------------------------------ writer


class ShardWriter:
    """Appends commits of completed problems for one rank; safe to kill at any moment and restart.

    Holds the directory's lock (shared with other ranks' writers) and its rank's lock until :meth:`close`,
    so compaction cannot run under it and a second process writing the same rank is refused. ``started``: the ``time.monotonic()`` at which the run started (default: now);
    every commit records the seconds since then, from which `judgekit data stats` reports wall time.
    """

    def __init__(self, out_dir: str | Path, settings: RunSettings, rank: int = 0, world_size: int = 1,
                 started: float | None = None) -> None:
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside world size {world_size}")
        self.out_dir = Path(out_dir)
        self.settings = settings
        self.rank = rank
        self.world_size = world_size
        self._started = time.monotonic() if started is None else started
        self._session = uuid.uuid4().hex
        require_kind(self.out_dir, MINED)
        check_compatible(self.out_dir, settings)  # before anything is written
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._lock = WriterLock(self.out_dir, rank, "mine")
        try:
            self._write_manifest()
            self._clean_leftovers()
            self._next_seq = scan(self.out_dir).high_water.get(rank, 0) + 1
        except BaseException:
            self._lock.release()
            raise
        self._schemas = {MISMATCHES: mismatch_schema(settings), PROBLEMS: problem_schema(settings)}

    def _write_manifest(self) -> None:
        """Create the manifest, or record a changed limit (check_compatible refused anything else)."""
        path = self.out_dir / MANIFEST
        if path.exists() and _read_manifest(self.out_dir)[1] == self.settings.to_dict():
            return
        doc = {"schema_version": SCHEMA_VERSION, "settings": self.settings.to_dict(),
               "provenance": provenance((self.settings.target, self.settings.draft), [self.settings.data_file])}
        write_manifest(path, doc, self.rank)

    def _clean_leftovers(self) -> None:
        """Remove this rank's temp files and uncommitted or replaced shards from a crashed earlier run."""
        clean_temps(self.out_dir, self.rank)
        for shard in scan(self.out_dir).leftovers:
            if shard.rank == self.rank:
                shard.path.unlink(missing_ok=True)
        fsync_dir(self.out_dir)

    def done_problem_ids(self) -> set[str]:
        """Problem ids committed by any rank, so a resumed or re-sharded run skips them."""
        return set(read_problems(self.out_dir, columns=["problem_id"]).column("problem_id").to_pylist())

    def write(self, mismatch_rows: list[dict[str, Any]], problem_rows: list[dict[str, Any]]) -> None:
        """Commit completed problems: mismatch shard first, then the problems shard that marks the commit."""
        if self._lock is None:
            raise ValueError("write after close")
        if not problem_rows:
            raise ValueError("a commit needs at least one completed problem")
        problem_rows = [row if "rank" in row else {**row, "rank": self.rank} for row in problem_rows]
        ids = [row["problem_id"] for row in problem_rows]
        if len(set(ids)) != len(ids):
            raise ValueError(f"problem ids repeat within one commit: {sorted(ids)}")
        stray = sorted({row["problem_id"] for row in mismatch_rows} - set(ids))
        if stray:
            raise ValueError(f"mismatch rows for problems not in this commit: {stray}")
        mism = rows_to_table(mismatch_rows, self._schemas[MISMATCHES])
        probs = rows_to_table(problem_rows, self._schemas[PROBLEMS])
        session = {"id": self._session, "rank": self.rank, "elapsed": time.monotonic() - self._started}
        probs = probs.replace_schema_metadata({**probs.schema.metadata, META_SESSION: json.dumps(session).encode()})
        seq = self._next_seq
        atomic_write_table(self.out_dir / shard_name(MISMATCHES, self.rank, seq), mism, self.rank)
        atomic_write_table(self.out_dir / shard_name(PROBLEMS, self.rank, seq), probs, self.rank)
        self._next_seq = seq + 1

    def close(self) -> None:
        """Release the directory lock (idempotent); the commits are already durable."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None  # type: ignore[assignment]

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ----------------------------------------------------------------------------------------------- readers


def _consistent(out_dir: Path, read):
    """read(commits), retried when a compaction finished between listing and reading (files vanished)."""
    for attempt in range(3):
        commits = scan(out_dir).commits
        try:
            return read(commits)
        except JudgekitError:
            if attempt == 2 or scan(out_dir).commits == commits:
                raise
    raise AssertionError("unreachable")


def read_mismatches(out_dir: str | Path, columns: Sequence[str] | None = None) -> pa.Table:
    """All committed mismatch rows of every rank (compactions first, then commits in rank, seq order).

    Each file's schema is checked and its page checksums verified: a corrupt file is an error naming it.
    """
    out_dir = Path(out_dir)
    settings = load_settings(out_dir)
    schema = mismatch_schema(settings)
    cols = _check_columns(columns, schema)
    # A writer commit whose mismatch shard is gone reads as having none (validate_dir names it); a
    # compaction's part is never skipped: the rows it holds exist nowhere else.
    return _consistent(out_dir, lambda commits: _concat(
        [_read_shard(s, settings, cols) for c in commits for s in _mismatch_shards(c) if s.rank < 0 or s.path.exists()],
        schema, cols))


def read_problems(out_dir: str | Path, columns: Sequence[str] | None = None) -> pa.Table:
    """All committed problem rows of every rank, in the order of read_mismatches; each file is checked."""
    out_dir = Path(out_dir)
    settings = load_settings(out_dir)
    schema = problem_schema(settings)
    cols = _check_columns(columns, schema)
    return _consistent(out_dir, lambda commits: _concat([_read_shard(c.marker, settings, cols) for c in commits],
                                                        schema, cols))


def validate_dir(out_dir: str | Path) -> RunSettings:
    """Check a whole directory (manifest, every committed file, cross-file consistency); returns its settings.

    Decodes every column of every committed file one row group at a time, verifying page checksums, so a
    flipped byte anywhere in the data, a truncated file or a lost compaction part is named.
    """
    out_dir = Path(out_dir)
    settings = load_settings(out_dir)
    commits = scan(out_dir).commits
    owner: dict[str, Path] = {}
    for commit in commits:
        pshard = commit.marker
        for path in commit.mismatches:
            if not path.exists():
                raise JudgekitError(f"{path}: missing, but its commit marker {pshard.path.name} exists")
        for table in iter_shard(pshard, settings):
            _check_task(pshard.path, table, settings.task)
            for pid in table.column("problem_id").to_pylist():
                if pid in owner:
                    where = "twice in" if owner[pid] == pshard.path else f"in {owner[pid].name} and"
                    raise JudgekitError(f"{pshard.path}: duplicate problem_id {pid!r} ({where} {pshard.path.name})")
                owner[pid] = pshard.path
    for commit in commits:
        for i, shard in enumerate(_mismatch_shards(commit)):
            rows = 0
            for table in iter_shard(shard, settings):
                rows += table.num_rows
                _check_task(shard.path, table, settings.task)
                unknown = sorted(set(table.column("problem_id").to_pylist()) - owner.keys())
                if unknown:
                    raise JudgekitError(f"{shard.path}: mismatch rows for problem_id(s) with no problem row: "
                                        f"{', '.join(map(repr, unknown[:5]))}")
            if commit.part_rows is not None and rows != commit.part_rows[i]:
                raise JudgekitError(f"{shard.path}: {rows} rows, but its compaction marker "
                                    f"{commit.marker.path.name} recorded {commit.part_rows[i]}")
    return settings


def _check_task(path: Path, table: pa.Table, task: str) -> None:
    other = sorted(set(table.column("task").to_pylist()) - {task})
    if other:
        raise JudgekitError(f"{path}: rows of task {other[0]!r} in a {task!r} directory")
