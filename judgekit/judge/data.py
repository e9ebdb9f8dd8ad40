"""Judge training data: mined shards -> split by problem -> mixed to a budget -> feature matrices.

The semantics (docs/design.md §4):

* A *source* is one ``--data`` argument: a mining directory, or several directories of one task joined by
  commas (``a,b``). Every directory must come from the same target and draft and hold the requested layer
  (and ``draft_hidden`` for target+draft features); anything else is refused, never silently mixed. A
  source mixing two tasks is refused (give each task its own ``--data`` argument). Within a source a
  mismatch row counts once: rows are unique by (task, problem, position, context), so directories that
  hold the same problems (or one directory given twice) add no duplicate rows to training or validation.
* The split is by problem, keyed by the pair (task, problem_id): a seeded hash ranks each source's problems
  and the lowest ``val_fraction`` go to validation; a problem that is in validation anywhere is in
  validation everywhere, so no problem is on both sides even if two sources share ids. The validation set
  does not depend on the mix, so every head of a sweep is scored on the same rows.
* The *unit* of the mix is a training problem that has at least one mined mismatch (``unit="problems"``,
  the default), or a mismatch row (``unit="mismatches"``: whole problems are taken in hash order and the last
  one is cut to hit the quota exactly). ``--mix a:b`` splits the *budget* (a number of units) into integer
  quotas by largest remainders, so a 9:1 … 1:9 sweep at one budget keeps the training total fixed and
  changes only the composition. The realised mix is reported; an infeasible one is an error that names the
  largest feasible budget.

Reading is column-wise with pyarrow (never pickle) and memory-bounded: a first pass reads only ids and
labels; features are then read shard by shard for the selected rows only, straight into one preallocated
float16 matrix (2 bytes per value, as stored), and converted to float32 one batch at a time by the loader.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from judgekit.store import mined as store
from judgekit.errors import JudgekitError

UNITS = ("problems", "mismatches")


# --------------------------------------------------------------------------------------------- arguments


def parse_mix(text: str, n_sources: int) -> tuple[float, ...]:
    """'9:1' -> (9.0, 1.0); one positive part per source, in the order of --data."""
    parts = text.split(":")
    try:
        values = tuple(float(p) for p in parts)
    except ValueError:
        raise JudgekitError(f"--mix takes positive numbers separated by ':' such as 9:1; got {text!r}") from None
    if len(values) != n_sources:
        raise JudgekitError(f"--mix {text} has {len(values)} part(s) but --data gives {n_sources} source(s)")
    if any(not np.isfinite(v) or v <= 0 for v in values):
        raise JudgekitError(f"--mix {text}: every part must be positive (drop a source instead of giving it 0)")
    return values


def parse_sweep(text: str, n_sources: int) -> list[tuple[str, tuple[float, ...]]]:
    mixes = [m.strip() for m in text.split(",") if m.strip()]
    if not mixes:
        raise JudgekitError(f"--mix-sweep needs mixes such as 9:1,7:3,5:5; got {text!r}")
    return [(m, parse_mix(m, n_sources)) for m in mixes]


def mix_label(text: str) -> str:
    return "mix-" + text.replace(":", "-").replace(".", "p")


def apportion(budget: int, mix: tuple[float, ...]) -> list[int]:
    """Integer quotas summing to budget, proportional to mix (largest remainders, ties to the first)."""
    total = sum(mix)
    exact = [budget * m / total for m in mix]
    quotas = [int(np.floor(e)) for e in exact]
    order = sorted(range(len(mix)), key=lambda i: (-(exact[i] - quotas[i]), i))
    for i in order[: budget - sum(quotas)]:
        quotas[i] += 1
    return quotas


def max_budget(mix: tuple[float, ...], available: list[int]) -> int:
    """The largest budget whose quotas fit what each source has."""
    total = sum(mix)
    budget = min(int(np.floor(a * total / m + 1e-9)) for a, m in zip(available, mix))
    while budget > 0 and any(q > a for q, a in zip(apportion(budget, mix), available)):
        budget -= 1
    return budget


def _rank_key(seed: int, task: str, problem_id: str, salt: str) -> int:
    """A stable pseudo-random rank of a problem (independent of which other problems were mined)."""
    digest = hashlib.blake2b(f"{salt}\0{seed}\0{task}\0{problem_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


# ------------------------------------------------------------------------------------------------ index


@dataclass
class _ShardRef:
    path: Path
    settings: store.RunSettings
    shard: store.Shard
    start: int  # first row of this shard in the source's row numbering
    rows: int


@dataclass
class SourceIndex:
    """Ids and labels of one source's rows (no features), and where each row lives."""

    name: str
    dirs: list[Path]
    shards: list[_ShardRef]
    group: np.ndarray  # [n] int: index into groups
    groups: list[tuple[str, str]]  # (task, problem_id)
    label: np.ndarray  # [n] bool: important
    keep: np.ndarray | None = None  # [n] bool: False for a repeat of an earlier row (same task, problem, position, context)

    @property
    def duplicates(self) -> int:
        return 0 if self.keep is None else int((~self.keep).sum())

    @property
    def rows(self) -> int:
        return int(self.label.shape[0])


@dataclass(frozen=True)
class FeatureSpec:
    layer: int
    features: str  # "target" or "target+draft"
    hidden_size: int
    draft_hidden_size: int | None
    target_model: str
    draft_model: str

    @property
    def columns(self) -> list[str]:
        cols = [f"hidden_l{self.layer}"]
        return cols + [store.DRAFT_COLUMN] if self.features == "target+draft" else cols

    @property
    def size(self) -> int:
        return self.hidden_size + (self.draft_hidden_size or 0)


def parse_sources(specs: list[str]) -> list[list[Path]]:
    sources = [[Path(p) for p in spec.split(",") if p] for spec in specs]
    if not sources or any(not s for s in sources):
        raise JudgekitError("--data needs at least one mining directory per source")
    return sources


def _source_name(settings: list[store.RunSettings], dirs: list[Path]) -> str:
    tasks = sorted({s.task for s in settings})
    if len(tasks) > 1:
        raise JudgekitError(f"--data {','.join(map(str, dirs))} mixes tasks {', '.join(tasks)} in one source; give "
                            "each task its own --data argument (a source is one task)")
    return tasks[0]


def _row_keys(table) -> list[bytes]:
    """One digest per row of (task, problem_id, position, context_ids): what makes a mismatch the same one."""
    ctx = table.column("context_ids").combine_chunks()
    offsets = ctx.offsets.to_numpy()
    values = ctx.values.to_numpy(zero_copy_only=False).astype(np.int32)
    keys = []
    for i, (t, p, pos) in enumerate(zip(table.column("task").to_pylist(), table.column("problem_id").to_pylist(),
                                        table.column("position").to_pylist())):
        h = hashlib.blake2b(f"{t}\0{p}\0{pos}\0".encode(), digest_size=16)
        h.update(values[offsets[i]: offsets[i + 1]].tobytes())
        keys.append(h.digest())
    return keys


def index_sources(sources: list[list[Path]]) -> tuple[list[SourceIndex], list[store.RunSettings]]:
    """First pass: read only task, problem_id and important of every committed shard."""
    out, all_settings = [], []
    for dirs in sources:
        settings_list = [store.load_settings(d) for d in dirs]
        all_settings += settings_list
        name = _source_name(settings_list, dirs)
        shards: list[_ShardRef] = []
        tasks, pids, labels, row_keys = [], [], [], []
        start = 0
        for d, settings in zip(dirs, settings_list):
            pairs, _ = store.committed_pairs(store.list_shards(d))
            for mshard, _p in pairs:
                if mshard is None:
                    continue
                t = store._read_shard(mshard, settings, ["task", "problem_id", "important", "position",
                                                         "context_ids"])
                shards.append(_ShardRef(d, settings, mshard, start, t.num_rows))
                start += t.num_rows
                tasks += t.column("task").to_pylist()
                pids += t.column("problem_id").to_pylist()
                labels.append(t.column("important").to_numpy(zero_copy_only=False).astype(bool))
                row_keys += _row_keys(t)
        seen: set[bytes] = set()
        keep = np.fromiter((k not in seen and not seen.add(k) for k in row_keys), dtype=bool, count=len(row_keys))
        keys: dict[tuple[str, str], int] = {}
        group = np.fromiter((keys.setdefault((t, p), len(keys)) for t, p in zip(tasks, pids)), dtype=np.int64,
                            count=len(tasks))
        label = np.concatenate(labels) if labels else np.zeros(0, dtype=bool)
        out.append(SourceIndex(name, dirs, shards, group, list(keys), label, keep))
    names = [s.name for s in out]
    for i, s in enumerate(out):  # keep names unique for tables and metrics keys
        if names.count(s.name) > 1:
            s.name = f"{s.name}#{i + 1}"
    return out, all_settings


def feature_spec(settings: list[store.RunSettings], sources: list[list[Path]], layer: int | None,
                 features: str) -> FeatureSpec:
    """The common feature spec of all directories, or a clear refusal to mix incompatible ones."""
    dirs = [d for s in sources for d in s]
    first = settings[0]
    for d, s in zip(dirs, settings):
        for name in ("target", "draft", "hidden_size"):
            if getattr(s, name) != getattr(first, name):
                raise JudgekitError(f"refusing to mix data mined with different {name.replace('_', ' ')}s: "
                                    f"{dirs[0]} has {getattr(first, name)!r}, {d} has {getattr(s, name)!r}")
    if layer is None:
        common = set(first.layers).intersection(*(s.layers for s in settings))
        layer = -1 if -1 in common else (first.layers[0] if first.layers[0] in common else None)
        if layer is None:
            raise JudgekitError(f"the mining directories share no feature layer ({dirs[0]} has "
                                f"{list(first.layers)}); mine them with the same --layers")
    for d, s in zip(dirs, settings):
        if layer not in s.layers:
            raise JudgekitError(f"refusing to mix data mined with different layers: {d} has layers "
                                f"{list(s.layers)}, not {layer}")
    draft_size = None
    if features == "target+draft":
        for d, s in zip(dirs, settings):
            if not s.draft_features:
                raise JudgekitError(f"--features target+draft needs draft features, but {d} was mined without "
                                    "--draft-features")
            if s.draft_hidden_size != first.draft_hidden_size:
                raise JudgekitError(f"refusing to mix data mined with different draft hidden sizes: {d}")
        draft_size = first.draft_hidden_size
    elif features != "target":
        raise JudgekitError(f"--features must be target or target+draft, not {features!r}")
    return FeatureSpec(layer, features, first.hidden_size, draft_size, first.target, first.draft)


# ------------------------------------------------------------------------------------------ split + mix


@dataclass
class Split:
    """Per source: validation groups, and training groups in their (seeded) order of use."""

    val_groups: list[np.ndarray]
    train_order: list[np.ndarray]


def split_by_problem(sources: list[SourceIndex], val_fraction: float, seed: int) -> Split:
    if not 0.0 < val_fraction < 1.0:
        raise JudgekitError(f"--val-fraction must be in (0, 1), got {val_fraction}")
    val_keys: set[tuple[str, str]] = set()
    for s in sources:
        ranked = sorted(s.groups, key=lambda g: _rank_key(seed, g[0], g[1], "split"))
        n_val = int(round(val_fraction * len(ranked)))
        if len(ranked) >= 2:
            n_val = min(max(n_val, 1), len(ranked) - 1)
        val_keys.update(ranked[:n_val])
    val_groups, train_order = [], []
    for s in sources:
        is_val = np.array([g in val_keys for g in s.groups], dtype=bool)
        val_groups.append(np.flatnonzero(is_val))
        train = [i for i in np.flatnonzero(~is_val)]
        train.sort(key=lambda i: _rank_key(seed, s.groups[i][0], s.groups[i][1], "mix"))
        train_order.append(np.array(train, dtype=np.int64))
    return Split(val_groups, train_order)


def _rows_by_group(s: SourceIndex) -> list[np.ndarray]:
    """Each group's row numbers, without repeated rows."""
    order = np.argsort(s.group, kind="stable")
    if s.keep is not None:
        order = order[s.keep[order]]
    bounds = np.searchsorted(s.group[order], np.arange(len(s.groups) + 1))
    return [order[bounds[g]: bounds[g + 1]] for g in range(len(s.groups))]


def available_units(sources: list[SourceIndex], split: Split, unit: str) -> list[int]:
    if unit == "problems":
        return [len(t) for t in split.train_order]
    sizes = [np.bincount(s.group if s.keep is None else s.group[s.keep], minlength=len(s.groups)) for s in sources]
    return [int(sz[t].sum()) for sz, t in zip(sizes, split.train_order)]


@dataclass
class Selection:
    """Rows chosen for training and validation (row numbers within each source)."""

    train_rows: list[np.ndarray]
    val_rows: list[np.ndarray]
    quotas: list[int]
    budget: int
    unit: str
    mix_text: str
    mix: tuple[float, ...]
    realised: list[dict[str, Any]] = field(default_factory=list)


def select(sources: list[SourceIndex], split: Split, mix_text: str, mix: tuple[float, ...], budget: int | None,
           unit: str) -> Selection:
    """Take each source's quota of training units (whole problems in seeded order) and all validation rows."""
    if unit not in UNITS:
        raise JudgekitError(f"--unit must be one of {', '.join(UNITS)}, not {unit!r}")
    avail = available_units(sources, split, unit)
    largest = max_budget(mix, avail)
    if budget is None:
        budget = largest
    if budget < 1:
        raise JudgekitError(f"--budget must be >= 1 (the largest feasible budget for mix {mix_text} is {largest})")
    quotas = apportion(budget, mix)
    for s, q, a in zip(sources, quotas, avail):
        if q > a:
            raise JudgekitError(
                f"mix {mix_text} at budget {budget} needs {q} training {unit} from {s.name} but it has {a}; "
                f"the largest feasible budget for this mix is {largest}")
    train_rows, val_rows, realised = [], [], []
    for i, (s, q, order, vg) in enumerate(zip(sources, quotas, split.train_order, split.val_groups)):
        by_group = _rows_by_group(s)
        if unit == "problems":
            chosen = [by_group[g] for g in order[:q]]
        else:
            chosen, left = [], q
            for g in order:
                if left <= 0:
                    break
                rows = by_group[g][:left]
                chosen.append(rows)
                left -= len(rows)
        tr = np.sort(np.concatenate(chosen)) if chosen else np.zeros(0, dtype=np.int64)
        va = np.sort(np.concatenate([by_group[g] for g in vg])) if len(vg) else np.zeros(0, dtype=np.int64)
        train_rows.append(tr)
        val_rows.append(va)
        n_problems = len(np.unique(s.group[tr]))
        realised.append({
            "source": s.name, "dirs": [str(d) for d in s.dirs], "units": q,
            "share": q / budget, "requested_share": mix[i] / sum(mix),
            "train_problems": n_problems, "train_mismatches": int(len(tr)),
            "train_important": int(s.label[tr].sum()),
            "val_problems": int(len(vg)), "val_mismatches": int(len(va)), "val_important": int(s.label[va].sum()),
            "available_train_units": avail[i], "duplicate_rows_dropped": s.duplicates,
        })
    return Selection(train_rows, val_rows, quotas, budget, unit, mix_text, mix, realised)


def format_realised(sel: Selection) -> str:
    lines = [f"mix {sel.mix_text}, budget {sel.budget} training {sel.unit}",
             f"{'source':<16}{'share':>8}{'wanted':>8}{'problems':>10}{'mismatch':>10}{'important':>10}"
             f"{'val prob':>10}{'val mism':>10}"]
    for r in sel.realised:
        lines.append(f"{r['source']:<16}{r['share']:>8.1%}{r['requested_share']:>8.1%}{r['train_problems']:>10}"
                     f"{r['train_mismatches']:>10}{r['train_important']:>10}{r['val_problems']:>10}"
                     f"{r['val_mismatches']:>10}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- features


def load_features(source: SourceIndex, rows: np.ndarray, spec: FeatureSpec, out: np.ndarray) -> None:
    """Write the features of `rows` (sorted row numbers of `source`) into `out` [len(rows), F] float16.

    Reads one shard at a time and only the feature columns, so memory is the output plus one shard.
    """
    pos = 0
    for ref in source.shards:
        lo, hi = np.searchsorted(rows, [ref.start, ref.start + ref.rows])
        if hi == lo:
            continue
        table = store._read_shard(ref.shard, ref.settings, spec.columns)
        local = rows[lo:hi] - ref.start
        col = 0
        for name in spec.columns:
            mat = store.features_to_numpy(table, name)
            out[pos: pos + len(local), col: col + mat.shape[1]] = mat[local]
            col += mat.shape[1]
        pos += len(local)
    if pos != len(rows):
        raise JudgekitError(f"{source.name}: expected {len(rows)} feature rows, read {pos} (shards changed?)")


@dataclass
class JudgeData:
    """The matrices a head is trained and validated on, with where each validation row came from."""

    spec: FeatureSpec
    selection: Selection
    x_train: np.ndarray  # [n, F] float16
    y_train: np.ndarray  # [n] float32 (1 = important)
    x_val: np.ndarray
    y_val: np.ndarray
    val_source: np.ndarray  # [n_val] int: index of the source
    source_names: list[str]

    def class_weights(self) -> tuple[float, float]:
        """(w_unimportant, w_important), 'balanced' as in scikit-learn: mean weight 1 over the training set."""
        n, pos = len(self.y_train), float(self.y_train.sum())
        return n / (2 * (n - pos)), n / (2 * pos)

    def scaler(self, chunk: int = 65536) -> tuple[np.ndarray, np.ndarray]:
        """Mean and std of the training features, accumulated in float64 chunk by chunk."""
        s = np.zeros(self.x_train.shape[1])
        ss = np.zeros(self.x_train.shape[1])
        for i in range(0, len(self.x_train), chunk):
            block = self.x_train[i: i + chunk].astype(np.float64)
            s += block.sum(0)
            ss += (block * block).sum(0)
        n = max(len(self.x_train), 1)
        mean = s / n
        std = np.sqrt(np.maximum(ss / n - mean * mean, 0.0))
        std[std < 1e-6] = 1.0  # constant features: leave them unscaled rather than divide by ~0
        return mean.astype(np.float32), std.astype(np.float32)

    def summary(self) -> dict[str, Any]:
        return {"train_rows": int(len(self.y_train)), "train_important": int(self.y_train.sum()),
                "val_rows": int(len(self.y_val)), "val_important": int(self.y_val.sum()),
                "unit": self.selection.unit, "budget": self.selection.budget,
                "sources": self.selection.realised}


def _matrix(n: int, size: int, cache_dir: str | Path | None, name: str) -> np.ndarray:
    """A float16 [n, size] matrix in memory, or memory-mapped .npy in cache_dir for data larger than RAM."""
    if cache_dir is None:
        return np.empty((n, size), dtype=np.float16)
    Path(cache_dir).mkdir(parents=True, exist_ok=True)
    rank = os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0"))  # each DDP process fills its own file
    return np.lib.format.open_memmap(Path(cache_dir) / f"{name}-r{rank}.npy", mode="w+", dtype=np.float16, shape=(n, size))


def build_data(sources: list[SourceIndex], sel: Selection, spec: FeatureSpec,
               cache_dir: str | Path | None = None) -> JudgeData:
    def gather(which: list[np.ndarray], name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = sum(len(r) for r in which)
        x = _matrix(n, spec.size, cache_dir, name)
        y = np.empty(n, dtype=np.float32)
        src = np.empty(n, dtype=np.int64)
        pos = 0
        for i, (s, rows) in enumerate(zip(sources, which)):
            load_features(s, rows, spec, x[pos: pos + len(rows)])
            y[pos: pos + len(rows)] = s.label[rows]
            src[pos: pos + len(rows)] = i
            pos += len(rows)
        return x, y, src

    x_tr, y_tr, _ = gather(sel.train_rows, "train")
    x_va, y_va, src_va = gather(sel.val_rows, "val")
    data = JudgeData(spec, sel, x_tr, y_tr, x_va, y_va, src_va, [s.name for s in sources])
    for what, y in (("training", y_tr), ("validation", y_va)):
        if len(y) == 0:
            raise JudgekitError(f"no mined rows in the {what} split")
        if y.min() == y.max():
            kind = "important" if y[0] else "unimportant"
            raise JudgekitError(f"the {what} split has a single class only (every mismatch is {kind}); mine more "
                                "problems")
    return data


def prepare(data_specs: list[str], *, layer: int | None = None, features: str = "target",
            val_fraction: float = 0.2, seed: int = 0
            ) -> tuple[list[SourceIndex], Split, FeatureSpec]:
    """Index all sources, check they can be mixed, and split them by problem."""
    sources_dirs = parse_sources(data_specs)
    sources, settings = index_sources(sources_dirs)
    spec = feature_spec(settings, sources_dirs, layer, features)
    for s in sources:
        if s.rows == 0:
            raise JudgekitError(f"no mined rows in {', '.join(map(str, s.dirs))} (mine some problems first)")
    labels = np.concatenate([s.label for s in sources])
    if labels.min() == labels.max():
        raise JudgekitError(f"every mined mismatch is {'important' if labels[0] else 'unimportant'}: a judge needs "
                            "both classes")
    return sources, split_by_problem(sources, val_fraction, seed), spec
