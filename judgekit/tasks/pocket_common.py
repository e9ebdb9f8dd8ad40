"""Small pure helpers shared by the pocket task generators: splits, seeded streams, solution styles
(no torch import: tasks load fast)."""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Sequence, TypeVar

from judgekit.tasks.base import Problem
from judgekit.tasks.common import apply_limit, read_records, require_fields, text_field

T = TypeVar("T")


def stable_hash(key: str) -> int:
    """A 64-bit hash that is stable across processes (Python's hash() is salted per run)."""
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")


def split_of(key: str, test_fraction: float) -> str:
    """Assign a canonical problem key to "train" or "test" by its hash: disjoint by construction."""
    return "test" if stable_hash(key) / 2**64 < test_fraction else "train"


def split_rng(seed: int, split: str, salt: str) -> random.Random:
    """An RNG for one (seed, split, task) stream, so splits and tasks never share a stream."""
    return random.Random(stable_hash(f"{salt}|{split}|{seed}"))


def weighted(rng: random.Random, options: Sequence[tuple[float, T]]) -> T:
    """Pick one option from (weight, value) pairs; the first option is conventionally the dominant one."""
    weights = [w for w, _ in options]
    return rng.choices([v for _, v in options], weights=weights, k=1)[0]


@dataclass(frozen=True)
class Style:
    """Solution habits: which of a problem's equivalent solutions a writer prefers.

    The target is trained on the "target" style and the draft on the "draft" style, so that the two models
    disagree on harmless choices (phrasing, operand order, loop vs builtin) the way a real draft's habits
    differ from its target's. `reverse` makes the last listed variant dominant instead of the first;
    `chance` overrides the probability of a yes/no habit (e.g. "swap": write `b + a`).
    """

    name: str
    reverse: bool = False
    chance: tuple[tuple[str, float], ...] = ()

    def p(self, habit: str, default: float) -> float:
        return dict(self.chance).get(habit, default)


STYLES = {
    "target": Style("target"),
    # The draft's habits: every multi-variant choice reversed (its dominant form is the target's rarest),
    # operand swaps and the "The answer is N." line more likely than not, conditions written `k < x` often.
    "draft": Style("draft", reverse=True, chance=(("swap", 0.6), ("answer_line", 0.6), ("flip_cond", 0.5),
                                                   ("count_builtin", 0.3))),
}


def get_style(style: "str | Style") -> Style:
    from judgekit.errors import JudgekitError

    if isinstance(style, Style):
        return style
    if style not in STYLES:
        raise JudgekitError(f"unknown pocket style {style!r}; known: {', '.join(STYLES)}")
    return STYLES[style]


@dataclass(frozen=True)
class Chooser:
    """Draws a solution's variant choices for one style; rng=None gives the canonical (target-dominant) form.

    With the "target" style it makes exactly the draws the generators made before styles existed, so the
    shipped target's training stream (and its weights) are unchanged."""

    rng: random.Random | None
    style: Style = STYLES["target"]

    def pick(self, options: Sequence[tuple[float, T]]) -> T:
        if self.rng is None:
            return options[0][1]
        if self.style.reverse:
            weights = [w for w, _ in options][::-1]
            options = [(w, v) for w, (_, v) in zip(weights, options)]
        return weighted(self.rng, options)

    def chance(self, habit: str, default: float) -> bool:
        return self.rng is not None and self.rng.random() < self.style.p(habit, default)


def problems_from_file(path: str, task: str, limit: int | None) -> list[Problem]:
    """Problems saved as rows {problem_id, question, reference, meta} (e.g. a fixed copy of a generated
    pocket split), in any format `read_records` reads."""
    rows = read_records(path)
    require_fields(rows, ("problem_id", "question", "reference"), path)
    return [Problem(task, str(row["problem_id"]), text_field(row, "question", f"{path}: row {i + 1}"),
                    row["reference"], row.get("meta") or {})
            for i, row in enumerate(apply_limit(rows, limit))]
