"""Small pure helpers shared by the pocket task generators (no torch import: tasks load fast)."""

from __future__ import annotations

import hashlib
import random
from typing import Sequence, TypeVar

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


def check_split(split: str) -> None:
    from judgekit.errors import JudgekitError

    if split not in ("train", "test"):
        raise JudgekitError(f"pocket tasks have splits 'train' and 'test', not {split!r}")
