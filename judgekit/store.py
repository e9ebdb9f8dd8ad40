"""On-disk store for mined mismatches (DESIGN.md §3, §7): sharded Parquet with a manifest and a commit marker.

Layout of a mining directory::

    manifest.json                          schema version + the run's settings (one run per directory)
    mismatches-r{rank:03d}-{seq:06d}.parquet   one row per mismatch, with hidden-state features
    problems-r{rank:03d}-{seq:06d}.parquet     one row per completed problem (the commit marker)

Each commit of a rank writes the mismatch shard first and the problems shard second, both atomically
(unique temp file, fsync, rename, fsync of the directory). A problems shard therefore only ever exists
when its mismatch shard is complete, so readers treat it as the commit marker and ignore a mismatch
shard without one: a crash at any moment loses at most the commit in flight and never duplicates a
problem on resume. Every file carries the schema version and the run fingerprint in its Parquet
metadata, so a shard copied in from another run is detected instead of silently mixed in.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from judgekit.errors import JudgekitError

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
MISMATCHES = "mismatches"
PROBLEMS = "problems"
META_VERSION = b"judgekit.schema_version"
META_KIND = b"judgekit.kind"
META_RUN = b"judgekit.run"
DRAFT_COLUMN = "draft_hidden"

_SHARD_RE = re.compile(r"^(mismatches|problems)-r(\d{3,})-(\d{6,})\.parquet$")
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
    return {k: v for k, v in d.items() if k not in _RESUMABLE_FIELDS}


def settings_diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Human-readable differences, one per field, e.g. "target 'a', not 'b'" (old first)."""
    return [f"{k} {old.get(k)!r}, not {new.get(k)!r}" for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]


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


def shard_name(kind: str, rank: int, seq: int) -> str:
    return f"{kind}-r{rank:03d}-{seq:06d}.parquet"


def _tmp_path(path: Path, rank: int) -> Path:
    """Unique temp name next to `path`, tagged with the rank so only that rank's writer cleans it up."""
    return path.with_name(f"{path.name}.r{rank:03d}.{uuid.uuid4().hex[:12]}.tmp")


def _fsync_dir(directory: Path) -> None:
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


def _atomic_write_bytes(path: Path, data: bytes, rank: int) -> None:
    tmp = _tmp_path(path, rank)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _atomic_write_table(path: Path, table: pa.Table, rank: int) -> None:
    tmp = _tmp_path(path, rank)
    strings = [f.name for f in table.schema if pa.types.is_string(f.type)]
    try:
        with open(tmp, "wb") as f:
            pq.write_table(table, f, compression="zstd", use_dictionary=strings)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


@dataclass(frozen=True)
class Shard:
    kind: str
    rank: int
    seq: int
    path: Path


def list_shards(out_dir: Path) -> list[Shard]:
    """Every shard file by name (committed or not), sorted by kind, rank, seq; other files are ignored."""
    shards = []
    for p in out_dir.iterdir():
        m = _SHARD_RE.match(p.name)
        if m and p.is_file():
            shards.append(Shard(m.group(1), int(m.group(2)), int(m.group(3)), p))
    return sorted(shards, key=lambda s: (s.kind, s.rank, s.seq))


def committed_pairs(shards: Iterable[Shard]) -> tuple[list[tuple[Shard | None, Shard]], list[Shard]]:
    """(mismatch shard or None, problems shard) per commit, and the orphaned mismatch shards.

    A problems shard is the commit marker, so its commit counts even if the mismatch shard was lost
    (validate_dir reports that); a mismatch shard without one is a crash between the two writes.
    """
    mism = {(s.rank, s.seq): s for s in shards if s.kind == MISMATCHES}
    probs = {(s.rank, s.seq): s for s in shards if s.kind == PROBLEMS}
    pairs = [(mism.get(key), probs[key]) for key in sorted(probs)]
    orphans = [mism[key] for key in sorted(mism) if key not in probs]
    return pairs, orphans


# --------------------------------------------------------------------------------------------- manifest


def _read_manifest(out_dir: Path) -> tuple[int, dict[str, Any]]:
    """(schema_version, settings dict) of a directory's manifest, or JudgekitError naming the file."""
    path = out_dir / MANIFEST
    if not out_dir.is_dir():
        raise JudgekitError(f"{out_dir}: no such directory")
    if not path.is_file():
        raise JudgekitError(f"{path}: missing manifest (not a judgekit mining directory?)")
    try:
        doc = json.loads(path.read_text())
        version, settings = doc["schema_version"], doc["settings"]
        if not isinstance(version, int) or not isinstance(settings, dict):
            raise TypeError("schema_version must be an int and settings an object")
    except (OSError, ValueError, KeyError, TypeError) as err:
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


def _manifest_bytes(settings: RunSettings) -> bytes:
    doc = {"schema_version": SCHEMA_VERSION, "settings": settings.to_dict()}
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()


# ---------------------------------------------------------------------------------------- shard checks


def _check_shard(shard: Shard, settings: RunSettings) -> pa.Schema:
    """Footer, metadata and columns of one shard; JudgekitError naming the file on any problem."""
    try:
        schema = pq.read_schema(shard.path)
    except (pa.ArrowException, OSError) as err:
        raise JudgekitError(f"{shard.path}: not a valid Parquet file ({err})") from err
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


def _read_shard(shard: Shard, settings: RunSettings, columns: list[str] | None = None) -> pa.Table:
    expected = _check_shard(shard, settings)
    try:
        table = pq.read_table(shard.path, columns=columns)
    except (pa.ArrowException, OSError) as err:
        raise JudgekitError(f"{shard.path}: not a valid Parquet file ({err})") from err
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


# ------------------------------------------------------------------------------------------------ writer


class ShardWriter:
    """Appends commits of completed problems for one rank; safe to kill at any moment and restart."""

    def __init__(self, out_dir: str | Path, settings: RunSettings, rank: int = 0, world_size: int = 1) -> None:
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside world size {world_size}")
        self.out_dir = Path(out_dir)
        self.settings = settings
        self.rank = rank
        self.world_size = world_size
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._ensure_manifest()
        self._clean_leftovers()
        self._schemas = {MISMATCHES: mismatch_schema(settings), PROBLEMS: problem_schema(settings)}
        own = [s.seq for s in list_shards(self.out_dir) if s.rank == rank]
        self._next_seq = max(own, default=0) + 1

    def _ensure_manifest(self) -> None:
        """Create the manifest, or refuse a directory mined with other settings (limit may differ)."""
        path = self.out_dir / MANIFEST
        if path.exists():
            version, old = _read_manifest(self.out_dir)
            if version != SCHEMA_VERSION:
                raise JudgekitError(f"{self.out_dir} was mined with store schema version {version}, not "
                                    f"{SCHEMA_VERSION} (use another --out)")
            diff = settings_diff(_without_resumable(old), self.settings.fingerprint())
            if diff:
                raise JudgekitError(f"{self.out_dir} was mined with {'; '.join(diff)} (use another --out)")
            if old == self.settings.to_dict():
                return  # a changed limit falls through: the manifest records the latest one
        _atomic_write_bytes(path, _manifest_bytes(self.settings), self.rank)

    def _clean_leftovers(self) -> None:
        """Remove this rank's temp files and uncommitted mismatch shards from a crashed earlier run."""
        for tmp in self.out_dir.glob(f"*.r{self.rank:03d}.*.tmp"):
            tmp.unlink(missing_ok=True)
        _, orphans = committed_pairs(list_shards(self.out_dir))
        for shard in orphans:
            if shard.rank == self.rank:
                shard.path.unlink(missing_ok=True)
        _fsync_dir(self.out_dir)

    def done_problem_ids(self) -> set[str]:
        """Problem ids committed by any rank, so a resumed or re-sharded run skips them."""
        return set(read_problems(self.out_dir, columns=["problem_id"]).column("problem_id").to_pylist())

    def write(self, mismatch_rows: list[dict[str, Any]], problem_rows: list[dict[str, Any]]) -> None:
        """Commit completed problems: mismatch shard first, then the problems shard that marks the commit."""
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
        seq = self._next_seq
        _atomic_write_table(self.out_dir / shard_name(MISMATCHES, self.rank, seq), mism, self.rank)
        _atomic_write_table(self.out_dir / shard_name(PROBLEMS, self.rank, seq), probs, self.rank)
        self._next_seq = seq + 1


# ----------------------------------------------------------------------------------------------- readers


def read_mismatches(out_dir: str | Path, columns: Sequence[str] | None = None) -> pa.Table:
    """All committed mismatch rows of every rank (in rank, seq order); each shard's schema is checked."""
    out_dir = Path(out_dir)
    settings = load_settings(out_dir)
    schema = mismatch_schema(settings)
    cols = _check_columns(columns, schema)
    pairs, _ = committed_pairs(list_shards(out_dir))
    tables = [_read_shard(m, settings, cols) for m, _p in pairs if m is not None]
    return _concat(tables, schema, cols)


def read_problems(out_dir: str | Path, columns: Sequence[str] | None = None) -> pa.Table:
    """All committed problem rows of every rank (in rank, seq order); each shard's schema is checked."""
    out_dir = Path(out_dir)
    settings = load_settings(out_dir)
    schema = problem_schema(settings)
    cols = _check_columns(columns, schema)
    pairs, _ = committed_pairs(list_shards(out_dir))
    tables = [_read_shard(p, settings, cols) for _m, p in pairs]
    return _concat(tables, schema, cols)


def validate_dir(out_dir: str | Path) -> RunSettings:
    """Check a whole directory (manifest, every committed shard, cross-shard consistency); returns its settings.

    Reads only the id columns of each shard, so it stays cheap on feature-heavy directories while still
    decoding real data pages (a corrupt page in those columns or a truncated file is caught).
    """
    out_dir = Path(out_dir)
    settings = load_settings(out_dir)
    pairs, _orphans = committed_pairs(list_shards(out_dir))
    owner: dict[str, Path] = {}
    for mshard, pshard in pairs:
        if mshard is None:
            missing = out_dir / shard_name(MISMATCHES, pshard.rank, pshard.seq)
            raise JudgekitError(f"{missing}: missing, but its commit marker {pshard.path.name} exists")
        table = _read_shard(pshard, settings, ["task", "problem_id"])
        _check_task(pshard.path, table, settings.task)
        for pid in table.column("problem_id").to_pylist():
            if pid in owner:
                where = "twice in" if owner[pid] == pshard.path else f"in {owner[pid].name} and"
                raise JudgekitError(f"{pshard.path}: duplicate problem_id {pid!r} ({where} {pshard.path.name})")
            owner[pid] = pshard.path
    for mshard, _pshard in pairs:
        assert mshard is not None
        table = _read_shard(mshard, settings, ["task", "problem_id"])
        _check_task(mshard.path, table, settings.task)
        unknown = sorted(set(table.column("problem_id").to_pylist()) - owner.keys())
        if unknown:
            raise JudgekitError(f"{mshard.path}: mismatch rows for problem_id(s) with no problem row: "
                                f"{', '.join(map(repr, unknown[:5]))}")
    return settings


def _check_task(path: Path, table: pa.Table, task: str) -> None:
    other = sorted(set(table.column("task").to_pylist()) - {task})
    if other:
        raise JudgekitError(f"{path}: rows of task {other[0]!r} in a {task!r} directory")


# ------------------------------------------------------------------------------------------------- stats


def _summary(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "min": None, "max": None}
    return {"mean": sum(values) / len(values), "min": min(values), "max": max(values)}


def _rate(num: int, den: int) -> float | None:
    return num / den if den else None


def dir_stats(out_dir: str | Path) -> dict[str, Any]:
    """Plain-JSON summary of a mining directory: sizes, label balance, rollout cost, features, shards."""
    out_dir = Path(out_dir)
    settings = load_settings(out_dir)
    probs = read_problems(out_dir, ["task", "problem_id", "n_rollouts", "n_mismatches", "target_correct",
                                    "wall_time", "rank"])
    mism = read_mismatches(out_dir, ["task", "important"])
    pairs, orphans = committed_pairs(list_shards(out_dir))

    by_task: dict[str, dict[str, Any]] = {}
    for task in probs.column("task").to_pylist():
        by_task.setdefault(task, {"problems": 0, "mismatches": 0, "important": 0})["problems"] += 1
    for task, important in zip(mism.column("task").to_pylist(), mism.column("important").to_pylist()):
        entry = by_task.setdefault(task, {"problems": 0, "mismatches": 0, "important": 0})
        entry["mismatches"] += 1
        entry["important"] += bool(important)
    for entry in by_task.values():
        entry["important_rate"] = _rate(entry["important"], entry["mismatches"])

    n_problems, n_mismatches = probs.num_rows, mism.num_rows
    n_important = sum(e["important"] for e in by_task.values())
    correct = sum(bool(x) for x in probs.column("target_correct").to_pylist())
    shard_ranks = {p.rank for _m, p in pairs}
    return {
        "dir": str(out_dir),
        "schema_version": SCHEMA_VERSION,
        "settings": settings.to_dict(),
        "problems": n_problems,
        "mismatches": n_mismatches,
        "important": n_important,
        "important_rate": _rate(n_important, n_mismatches),
        "by_task": dict(sorted(by_task.items())),
        "rollouts_per_problem": _summary(probs.column("n_rollouts").to_pylist()),
        "mismatches_per_problem": _summary(probs.column("n_mismatches").to_pylist()),
        "target_correct": correct,
        "target_accuracy": _rate(correct, n_problems),
        "features": {"layers": list(settings.layers), "columns": feature_columns(settings), "dtype": "float16"},
        "ranks": len(shard_ranks),
        "shards": len(pairs),
        "uncommitted_shards": len(orphans),
        "wall_time_s": float(sum(probs.column("wall_time").to_pylist())),
        "size_bytes": sum(s.path.stat().st_size for s in list_shards(out_dir)),
    }


def _fmt_duration(seconds: float) -> str:
    seconds = round(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h {m:02d}m {s:02d}s" if h else f"{m}m {s:02d}s" if m else f"{s}s"


def _fmt_pct(rate: float | None) -> str:
    return "n/a" if rate is None else f"{100 * rate:.1f}%"


def _fmt_summary(s: dict[str, float | None]) -> str:
    if s["mean"] is None:
        return "n/a"
    return f"mean {s['mean']:.2f}, min {s['min']:g}, max {s['max']:g}"


def format_stats(stats: dict[str, Any]) -> str:
    """Multi-line human summary of dir_stats, for `judgekit data stats`."""
    st = stats["settings"]
    limit = "none" if st["limit"] is None else st["limit"]
    source = f" (data file {st['data_file']})" if st["data_file"] else ""
    lines = [
        f"mining directory {stats['dir']} (store schema v{stats['schema_version']})",
        f"  run          task {st['task']}, split {st['split']}{source}, limit {limit}, "
        f"max_new_tokens {st['max_new_tokens']}",
        f"  models       target {st['target']}, draft {st['draft']}",
        f"  problems     {stats['problems']} in {stats['shards']} shard(s) from {stats['ranks']} rank(s), "
        f"summed problem time {_fmt_duration(stats['wall_time_s'])}, {stats['size_bytes'] / 2**20:.1f} MiB",
        f"  target acc   {_fmt_pct(stats['target_accuracy'])} ({stats['target_correct']}/{stats['problems']})",
        f"  rollouts     {_fmt_summary(stats['rollouts_per_problem'])} per problem",
        f"  mismatches   {stats['mismatches']} ({_fmt_summary(stats['mismatches_per_problem'])} per problem)",
        f"  important    {stats['important']}/{stats['mismatches']} ({_fmt_pct(stats['important_rate'])})",
    ]
    for task, e in stats["by_task"].items():
        lines.append(f"    {task:<10} {e['important']}/{e['mismatches']} important "
                     f"({_fmt_pct(e['important_rate'])}) over {e['problems']} problem(s)")
    cols = ", ".join(f"{name}[{size}]" for name, size in stats["features"]["columns"].items())
    lines.append(f"  features     {cols} {stats['features']['dtype']}")
    if stats["uncommitted_shards"]:
        lines.append(f"  note         {stats['uncommitted_shards']} uncommitted mismatch shard(s) ignored "
                     "(a crash mid-commit; the next run of that rank removes them)")
    return "\n".join(lines)
