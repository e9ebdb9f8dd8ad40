"""Rank, world size and device of this process, and the round-robin deal of work to ranks (written once).

`judgekit mine` and `judgekit eval` run as independent processes under torchrun (or any launcher exporting
RANK / WORLD_SIZE / LOCAL_RANK); each takes every world-size-th item of the same ordered work list, so the
ranks finish together and a resumed run with another world size still covers every item exactly once
(what is already on disk is skipped, whoever wrote it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence, TypeVar

from judgekit.errors import JudgekitError

T = TypeVar("T")


@dataclass(frozen=True)
class DistEnv:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0


def _int_env(name: str, default: str) -> int:
    value = os.environ.get(name, default)
    try:
        return int(value)
    except ValueError:
        raise JudgekitError(f"{name}={value!r} is not an integer") from None


def distributed_env() -> DistEnv:
    """This process's place in the launch, from RANK / WORLD_SIZE / LOCAL_RANK (a single process without them)."""
    rank = _int_env("RANK", "0")
    world = _int_env("WORLD_SIZE", "1")
    local = _int_env("LOCAL_RANK", str(rank))
    if world < 1 or not 0 <= rank < world:
        raise JudgekitError(f"RANK={rank} is not in [0, WORLD_SIZE={world})")
    if local < 0:
        raise JudgekitError(f"LOCAL_RANK={local} is negative")
    return DistEnv(rank, world, local)


def my_share(items: Sequence[T], rank: int, world_size: int) -> list[T]:
    """This rank's items: every world_size-th, starting at its rank (round-robin, order kept)."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside world size {world_size}")
    return list(items[rank::world_size])


def rank_device(device: str, env: DistEnv) -> str:
    """``--device auto`` under a launcher with several ranks: one GPU per local rank (round-robin over the
    visible GPUs); any other choice, or a single process, is left to the model loader."""
    if device != "auto" or env.world_size <= 1:
        return device
    import torch

    if not torch.cuda.is_available():
        return device
    return f"cuda:{env.local_rank % torch.cuda.device_count()}"
