"""What `judgekit eval` evaluates: the points of a sweep (rule, parameters, temperature, block size, seed), their
labels and keys, and the settings every point of an evaluation directory shares."""

from __future__ import annotations

from dataclasses import dataclass, field

from judgekit.errors import JudgekitError


def resolve_threshold(judge, value: float | str) -> float:
    """A judge threshold given as a number, or by the name of one saved in the judge's config (p20, recall90)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    saved = (judge.config if hasattr(judge, "config") else judge).get("thresholds") or {}
    if value not in saved:
        names = ", ".join(sorted(saved)) or "none"
        raise JudgekitError(f"judge threshold {value!r} is not saved in the judge (saved: {names})")
    return float(saved[value])


def load_judge_once(path: str, judges: dict) -> tuple[object, str]:
    """(judge, weights digest) of a judge directory, read from disk the first time only (``judges`` caches).

    The digest is that of the judge's weights serialised the way `judgekit train` saves them (for a saved
    judge: the bytes of its weights file), so it is computed from the loaded judge without a second read."""
    if path not in judges:
        import hashlib

        from safetensors.torch import save

        from judgekit.judge.head import load_judge

        judge = load_judge(path)  # a missing or corrupt judge fails clearly here
        blob = save({k: v.contiguous().float().cpu() for k, v in judge._tensors().items()})
        judges[path] = (judge, hashlib.sha1(blob).hexdigest()[:12])
    return judges[path]


CHAIN = "chain"  # the `tree` sweep value of a plain chain of drafts


@dataclass
class EvalPoint:
    """One point of a sweep: a rule with its parameters, decoded at one temperature, block size and seed, on a
    chain of drafts or a static draft tree (``tree``: its spec, the block size then being its depth)."""

    rule: str
    params: dict  # JSON-serialisable (a judge is its directory path)
    temperature: float
    block_size: int
    seed: int
    label: str = ""
    tree: str | None = None

    def _key(self, with_seed: bool) -> str:
        import hashlib
        import json

        # a chain point's key leaves the tree out, so keys written before trees existed still resume
        d = {"rule": self.rule, "params": self.params, "temperature": self.temperature,
             "block_size": self.block_size, **({"seed": self.seed} if with_seed else {}),
             **({"tree": self.tree} if self.tree is not None else {})}
        return hashlib.sha1(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def key(self) -> str:
        return self._key(True)

    @property
    def config_key(self) -> str:
        return self._key(False)


def point_label(rule: str, params: dict, tree: str | None = None) -> str:
    """What the summary calls a point: the rule and its parameters, and ``tree SPEC`` for a tree point."""
    from pathlib import Path

    from judgekit.decode.params import label_part

    parts = []
    for k, v in params.items():
        if k == "judge":
            parts.insert(0, Path(v).name)
        elif k in ("threshold_name", "judge_sha"):
            continue
        elif k == "threshold" and "threshold_name" in params:
            parts.append(f"t={params['threshold_name']}({v:.3g})")
        else:
            parts.append(label_part(k, v))
    return " ".join([rule, *parts, *([f"tree {tree}"] if tree is not None else [])])


def tree_of(value: str | None):
    """A sweep's tree value -> the parsed :class:`judgekit.decode.tree.TreeSpec`, or None for a chain (a bad
    spec is one JudgekitError before any model loads)."""
    if value is None or value == CHAIN:
        return None
    from judgekit.decode.tree import parse_tree

    return parse_tree(value)


@dataclass
class Sweep:
    """What to evaluate: rules, lists of parameter values (every combination a rule uses), judges, decoding."""

    rules: list[str]
    values: dict = field(default_factory=dict)  # rule parameter sweep keys -> list of values
    judges: list[str] = field(default_factory=list)
    temperatures: list[float] = field(default_factory=lambda: [0.0])
    block_sizes: list[int] = field(default_factory=lambda: [8])
    seeds: list[int] = field(default_factory=lambda: [0])
    trees: list[str] = field(default_factory=lambda: [CHAIN])  # CHAIN or tree specs (2,2,1,1, eagle)

    def points(self, loaded: dict | None = None) -> list[EvalPoint]:
        """Every point; ``loaded`` caches the judges read (path -> (judge, digest)) for the run to reuse."""
        from judgekit.decode.params import combinations, rule_spec

        from judgekit.decode.tree_verify import check_tree_rule

        loaded = {} if loaded is None else loaded
        out: list[EvalPoint] = []
        # (tree spec or None, block sizes): a tree's depth is its block size
        shapes = [(None, self.block_sizes) if t is None else (t.spec, [t.depth])
                  for t in map(tree_of, self.trees)]
        for rule in self.rules:
            combos = combinations(rule, self.values)
            if rule_spec(rule).needs_judge:
                if not self.judges:
                    raise JudgekitError("rule judge needs --judge DIR (one or more trained judge directories)")
                combos = [self._judge_params(j, c, loaded) for j in self.judges for c in combos]
            for params in combos:
                built = self._check(rule, params, loaded)
                for tree, gammas in shapes:
                    if tree is not None:
                        check_tree_rule(built)
                    for temp in self.temperatures:
                        # Greedy decoding does not depend on the seed: one seed is enough.
                        for seed in (self.seeds[:1] if temp == 0 else self.seeds):
                            for gamma in gammas:
                                out.append(EvalPoint(rule, params, float(temp), int(gamma), int(seed),
                                                     point_label(rule, params, tree), tree))
        unique = {p.key: p for p in out}
        return list(unique.values())

    @staticmethod
    def _judge_params(path: str, combo: dict, loaded: dict) -> dict:
        from judgekit.decode.params import JUDGE_THRESHOLD as T

        judge, digest = load_judge_once(str(path), loaded)
        # The weights' digest is part of the point: a judge retrained in place is a new point, never resumed.
        params = {"judge": str(path), "judge_sha": digest}
        spec = combo.get(T.name, T.default)
        params[T.name] = resolve_threshold(judge, spec)
        if isinstance(spec, str):
            params["threshold_name"] = spec
        return {**{k: v for k, v in combo.items() if k != T.name}, **params}

    @staticmethod
    def _check(rule: str, params: dict, loaded: dict):
        """Build the rule once (with its loaded judge) so a bad parameter fails before any model loads."""
        from judgekit.decode.rules import make_rule

        return make_rule(rule, **rule_kwargs(params, loaded))


def rule_kwargs(params: dict, loaded: dict) -> dict:
    """A point's params as rule arguments: the judge directory replaced by the judge loaded from it."""
    kwargs = {k: v for k, v in params.items() if k not in ("threshold_name", "judge_sha")}
    if "judge" in kwargs:
        kwargs["judge"] = load_judge_once(kwargs["judge"], loaded)[0]
    return kwargs


@dataclass(frozen=True)
class EvalSettings:
    """What every point of an evaluation directory shares; a rerun must agree on it (except limit)."""

    task: str
    target: str
    draft: str
    split: str = "test"
    data_file: str | None = None
    limit: int | None = None
    max_new_tokens: int = 256
    top_k: int | None = None
    top_p: float | None = None
    chat_template: bool = True

    def to_dict(self) -> dict:
        import dataclasses

        return dataclasses.asdict(self)


# ----------------------------------------------------------------------------------------------------------
# Settings of a `judgekit eval` run: built-in defaults < config file < command line (judgekit.config declares
# every key once, for both).


def resolve_eval(config_path: str | None, given: dict) -> tuple[dict, list[dict]]:
    """(run settings, sweeps), every value checked. ``given``: the values set on the command line (by key)."""
    from judgekit.config import EVAL_RUN, check_given, eval_sweep_settings, load_eval_config

    sweep_settings = eval_sweep_settings()
    config = load_eval_config(config_path) if config_path else {}
    given = check_given(given, (*EVAL_RUN, *sweep_settings))
    run_keys = {s.key for s in EVAL_RUN}
    run = {s.key: s.default for s in EVAL_RUN}
    run.update({k: v for k, v in config.items() if k in run_keys})
    run.update({k: v for k, v in given.items() if k in run_keys})
    for key in ("task", "target", "draft", "out"):
        if not run.get(key):
            raise JudgekitError(f"--{key} is required (on the command line or in the config file)")
    top = {k: v for k, v in config.items() if k not in run_keys and k != "sweep"}
    over = {k: v for k, v in given.items() if k not in run_keys}
    sweeps = []
    for entry in config.get("sweep") or [{}]:
        s = {**top, **entry, **over}
        if not s.get("rule"):
            raise JudgekitError("--rule is required (one or more rule names, on the command line or in the config)")
        for setting in sweep_settings:
            if setting.default is not None:
                s.setdefault(setting.key, [setting.default])
        sweeps.append(s)
    return run, sweeps


def build_points(sweeps: list[dict], loaded: dict | None = None) -> list[EvalPoint]:
    """The points of every sweep, each once (``loaded`` caches the judges read, as in Sweep.points)."""
    from judgekit.decode.params import param_keys

    loaded = {} if loaded is None else loaded
    points: list[EvalPoint] = []
    for s in sweeps:
        sweep = Sweep(rules=list(s["rule"]), values={k: list(s[k]) for k in param_keys() if k in s},
                      judges=[str(j) for j in s.get("judge") or []], temperatures=list(s["temperature"]),
                      block_sizes=list(s["block_size"]), seeds=list(s["seeds"]), trees=list(s["tree"]))
        points.extend(sweep.points(loaded))
    return list({p.key: p for p in points}.values())
