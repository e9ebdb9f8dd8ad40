"""Every acceptance rule's name and parameters, declared once and importable without torch.

A :class:`Param` says what a rule parameter is: its dataclass field on the rule, its type, default and
allowed interval (or choices), the key that names it in sweeps and config files (``fuzzy_threshold``: the
flag ``--fuzzy-threshold``), the name its range errors use, and the values `judgekit analyze` sweeps by
default. :mod:`judgekit.decode.rules` builds its dataclass fields from these (and validates through
:meth:`Param.check`); the CLI flags (judgekit/commands/_args.py), sweep expansion and point labels
(judgekit/evaluate/sweep.py), config validation (judgekit/config.py), ``describe()`` and the analysis grid
all read this table, so a parameter is added or changed here only.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from judgekit.errors import JudgekitError

@dataclass(frozen=True)
class Param:
    """One rule parameter. ``interval`` is written as in the paper ("(0, 1]", "[0, inf)")."""

    name: str  # the rule's dataclass field
    kind: type  # float or str
    default: Any
    key: str  # sweep / config key; the CLI flag is --key with dashes
    what: str  # how errors name it ("lambda must be in [0, 1]")
    help: str
    interval: str | None = None
    choices: tuple[str, ...] | None = None
    grid: tuple = ()  # `judgekit analyze` sweeps these values when none are given
    named_values: bool = False  # the CLI/config may give a name resolved later (a judge's saved thresholds)

    @property
    def flag(self) -> str:
        return "--" + self.key.replace("_", "-")

    def check(self, value: Any) -> Any:
        """The value if the rule accepts it, else a JudgekitError naming the parameter and its range."""
        if self.choices is not None:
            if value not in self.choices:
                raise JudgekitError(f"unknown {self.what} {value!r}; use {', '.join(self.choices[:-1])} "
                                    f"or {self.choices[-1]}")
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise JudgekitError(f"{self.what} must be a number, got {value!r}")
        if self.interval is not None and not in_interval(value, self.interval):
            raise JudgekitError(f"{self.what} must be in {self.interval}, got {value}")
        return value


def in_interval(value: float, interval: str) -> bool:
    """Whether value lies in an interval written "(0, 1]", "[1, inf)" (NaN lies in none)."""
    text = interval.strip()
    low, high = (float(x.strip()) for x in text[1:-1].split(","))
    above = value >= low if text[0] == "[" else value > low
    below = value <= high if text[-1] == "]" else value < high
    return above and below


LENIENCE = Param("lenience", float, 0.5, "lenience", "lenience", "lenience l", "(0, 1]",
                 grid=(0.2, 0.5, 0.8))
LAM = Param("lam", float, 0.5, "lam", "lambda",
            "interpolation lambda: [0, 1] for cos, (0, 1] for cos-adaptive, cos-ceiling and cos-ceiling-rescaled",
            "[0, 1]",
            grid=(0.2, 0.5, 0.8))
# Table 1's ablations divide by lambda: lambda = 0 (pure draft) is not allowed there, unlike plain CoS.
LAM_POSITIVE = Param("lam", float, 0.5, "lam", "lambda", LAM.help, "(0, 1]", grid=LAM.grid)
FUZZY_THRESHOLD = Param("threshold", float, 0.5, "fuzzy_threshold", "fuzzy threshold",
                        "divergence threshold T", "[0, inf)", grid=(0.1, 0.5))
DIVERGENCE = Param("divergence", str, "kl", "divergence", "divergence", "divergence D",
                   choices=("kl", "tv", "js"), grid=("kl",))
JUDGE_THRESHOLD = Param("threshold", float, 0.5, "judge_threshold", "judge threshold",
                        "accept if P(important) < this; a number or a threshold saved in the judge "
                        "(p10..p90, recall90)", "[0, 1]", named_values=True)
P_BASE = Param("p_base", float, 0.1, "p_base", "p_base", "min-p base", "(0, 1)",
               grid=(0.1, 0.3))
EPSILON = Param("epsilon", float, 0.0009, "epsilon", "epsilon", "eta-sampling epsilon",
                "(0, 1)", grid=(0.0009, 0.009))
DELTA = Param("delta", float, 0.03, "delta", "delta", "eta-sampling delta", "(0, inf)",
              grid=(0.03,))


@dataclass(frozen=True)
class RuleSpec:
    name: str
    params: tuple[Param, ...] = ()
    needs_judge: bool = False  # takes a trained judge (--judge DIR): not analysable in closed form


_SPECS = [
    RuleSpec("lossless"),
    RuleSpec("lenience", (LENIENCE,)),
    RuleSpec("cos", (LAM,)),
    RuleSpec("cos-adaptive", (LAM_POSITIVE,)),
    RuleSpec("cos-ceiling", (LAM_POSITIVE,)),
    RuleSpec("cos-ceiling-rescaled", (LAM_POSITIVE,)),
    RuleSpec("fuzzy", (FUZZY_THRESHOLD, DIVERGENCE)),
    RuleSpec("judge", (JUDGE_THRESHOLD,), needs_judge=True),
    RuleSpec("speccascade", (P_BASE,)),
    RuleSpec("typical", (EPSILON, DELTA)),
    RuleSpec("minp", (P_BASE,)),
    RuleSpec("eta", (EPSILON, DELTA)),
]
RULE_SPECS: dict[str, RuleSpec] = {s.name: s for s in _SPECS}
RULE_NAMES: tuple[str, ...] = tuple(RULE_SPECS)


def rule_spec(name: str) -> RuleSpec:
    if name not in RULE_SPECS:
        raise JudgekitError(f"unknown rule {name!r}; choose from {', '.join(RULE_NAMES)}")
    return RULE_SPECS[name]


def flag_params() -> list[Param]:
    """One Param per sweep key (the first rule's declaration), in declaration order: one CLI flag each."""
    seen: dict[str, Param] = {}
    for spec in _SPECS:
        for p in spec.params:
            old = seen.setdefault(p.key, p)
            # A key shared by rules must mean one thing on the command line (ranges may differ per rule).
            assert (old.kind, old.default, old.choices, old.named_values) == (p.kind, p.default, p.choices,
                                                                               p.named_values), p.key
    return list(seen.values())


def rules_using(key: str) -> list[str]:
    return [s.name for s in _SPECS if any(p.key == key for p in s.params)]


def param_keys() -> tuple[str, ...]:
    """Every sweep / config key that holds a rule parameter."""
    return tuple(p.key for p in flag_params())


def combinations(rule: str, values: dict[str, list]) -> list[dict[str, Any]]:
    """Every combination of the rule's own parameter values (``values`` by sweep key; rules ignore the
    keys of others), as {field: value}; a parameter without values is left out (the rule's default)."""
    spec = rule_spec(rule)
    lists = [[(p.name, v) for v in values.get(p.key) or []] for p in spec.params]
    return [dict(c) for c in itertools.product(*[opts for opts in lists if opts])]


def label_part(name: str, value: Any) -> str:
    """How a parameter appears in a point's label ("lam=0.5")."""
    return f"{name}={value:g}" if isinstance(value, float) else f"{name}={value}"


def rule_field(param: Param) -> Any:
    """The dataclass field of ``param`` on its rule (rules.py): the default, and the Param as metadata."""
    return field(default=param.default, metadata={"param": param})
