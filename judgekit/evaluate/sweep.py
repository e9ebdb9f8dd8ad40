"""What `judgekit eval` evaluates: the points of a sweep (rule, parameters, temperature, block size, seed), their
labels and keys, and the settings every point of an evaluation directory shares."""

from __future__ import annotations

from dataclasses import dataclass, field

from judgekit.errors import JudgekitError


# ----------------------------------------------------------------------------------------------------------
# `judgekit eval`: a sweep of (rule, parameters, temperature, block size, seed) points over a task's problems,
# per-problem records on disk (judgekit.store.records), and a summary with 95 % intervals.

# Sweep keys holding rule parameters, and the rule field each one feeds ("threshold" depends on the rule).
RULE_PARAM_KEYS = ("lenience", "lam", "fuzzy_threshold", "divergence", "judge_threshold", "p_base", "epsilon",
                   "delta")
_FIELD_KEY = {"threshold": {"fuzzy": "fuzzy_threshold", "judge": "judge_threshold"}}


def rule_param_fields(rule: str) -> list[str]:
    """The rule's numeric/string parameters (dataclass fields, without the judge object)."""
    import dataclasses

    from judgekit.decode.rules import RULES

    cls = RULES[rule]
    if not dataclasses.is_dataclass(cls):
        return []
    return [f.name for f in dataclasses.fields(cls) if f.name != "judge"]


def _sweep_key(rule: str, field_name: str) -> str:
    return _FIELD_KEY.get(field_name, {}).get(rule, field_name)


def resolve_threshold(judge, value: float | str) -> float:
    """A judge threshold given as a number, or by the name of one saved in the judge's config (p20, recall90)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    saved = (judge.config if hasattr(judge, "config") else judge).get("thresholds") or {}
    if value not in saved:
        names = ", ".join(sorted(saved)) or "none"
        raise JudgekitError(f"judge threshold {value!r} is not saved in the judge (saved: {names})")
    return float(saved[value])


def _judge_digest(path: str) -> str:
    import hashlib

    from judgekit.judge.head import WEIGHTS_NAME, resolve_judge_dir

    return hashlib.sha1((resolve_judge_dir(path) / WEIGHTS_NAME).read_bytes()).hexdigest()[:12]


def _judge_config(path: str) -> dict:
    from judgekit.judge.head import load_judge

    return load_judge(path).config


@dataclass
class EvalPoint:
    """One point of a sweep: a rule with its parameters, decoded at one temperature, block size and seed."""

    rule: str
    params: dict  # JSON-serialisable (a judge is its directory path)
    temperature: float
    block_size: int
    seed: int
    label: str = ""

    def _key(self, with_seed: bool) -> str:
        import hashlib
        import json

        d = {"rule": self.rule, "params": self.params, "temperature": self.temperature,
             "block_size": self.block_size, **({"seed": self.seed} if with_seed else {})}
        return hashlib.sha1(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def key(self) -> str:
        return self._key(True)

    @property
    def config_key(self) -> str:
        return self._key(False)


def _fmt(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def point_label(rule: str, params: dict) -> str:
    from pathlib import Path

    parts = []
    for k, v in params.items():
        if k == "judge":
            parts.insert(0, Path(v).name)
        elif k in ("threshold_name", "judge_sha"):
            continue
        elif k == "threshold" and "threshold_name" in params:
            parts.append(f"t={params['threshold_name']}({v:.3g})")
        else:
            parts.append(f"{k}={_fmt(v)}")
    return " ".join([rule, *parts])


@dataclass
class Sweep:
    """What to evaluate: rules, lists of parameter values (every combination a rule uses), judges, decoding."""

    rules: list[str]
    values: dict = field(default_factory=dict)  # RULE_PARAM_KEYS -> list of values
    judges: list[str] = field(default_factory=list)
    temperatures: list[float] = field(default_factory=lambda: [0.0])
    block_sizes: list[int] = field(default_factory=lambda: [8])
    seeds: list[int] = field(default_factory=lambda: [0])

    def points(self) -> list[EvalPoint]:
        import itertools

        from judgekit.decode.rules import RULES

        out: list[EvalPoint] = []
        for rule in self.rules:
            if rule not in RULES:
                raise JudgekitError(f"unknown rule {rule!r}; choose from {', '.join(RULES)}")
            names = rule_param_fields(rule)
            lists = [[(n, v) for v in self.values.get(_sweep_key(rule, n), [])] for n in names]
            lists = [opts for opts in lists if opts]  # a parameter without values keeps the rule's default
            combos = [dict(c) for c in itertools.product(*lists)]
            if rule == "judge":
                if not self.judges:
                    raise JudgekitError("rule judge needs --judge DIR (one or more trained judge directories)")
                combos = [self._judge_params(j, c) for j in self.judges for c in combos]
            for params in combos:
                self._check(rule, params)
                for temp in self.temperatures:
                    # Greedy decoding does not depend on the seed: one seed is enough.
                    for seed in (self.seeds[:1] if temp == 0 else self.seeds):
                        for gamma in self.block_sizes:
                            out.append(EvalPoint(rule, params, float(temp), int(gamma), int(seed),
                                                 point_label(rule, params)))
        unique = {p.key: p for p in out}
        return list(unique.values())

    @staticmethod
    def _judge_params(path: str, combo: dict) -> dict:
        config = _judge_config(path)  # loads and checks the judge: a missing or corrupt one fails clearly here
        # The weights' digest is part of the point: a judge retrained in place is a new point, never resumed.
        params = {"judge": str(path), "judge_sha": _judge_digest(path)}
        spec = combo.get("threshold", 0.5)
        params["threshold"] = resolve_threshold(config, spec)
        if isinstance(spec, str):
            params["threshold_name"] = spec
        return {**{k: v for k, v in combo.items() if k != "threshold"}, **params}

    @staticmethod
    def _check(rule: str, params: dict) -> None:
        """Build the rule once (with a stand-in judge) so a bad parameter fails before any model loads."""
        from judgekit.decode.rules import make_rule

        p = {k: v for k, v in params.items() if k not in ("threshold_name", "judge_sha")}
        if rule == "judge":
            p["judge"] = lambda h, t: h
        make_rule(rule, **p)


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
