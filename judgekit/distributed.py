"""This process's rank, world size and local rank under torchrun (or any launcher exporting RANK/WORLD_SIZE),
and the device each rank decodes on: shared by `judgekit mine` and `judgekit eval`."""

from __future__ import annotations

import os

from judgekit.errors import JudgekitError


def distributed_env() -> tuple[int, int, int]:
    """(rank, world size, local rank) as set by torchrun or any launcher that exports RANK/WORLD_SIZE."""
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", str(rank)))
    if not 0 <= rank < world:
        raise JudgekitError(f"RANK={rank} is not in [0, WORLD_SIZE={world})")
    return rank, world, local


def rank_device(device: str, world: int, local: int) -> str:
    """--device auto with several ranks: each rank its own GPU (CPU when there is none)."""
    if device != "auto" or world <= 1:
        return device
    import torch

    return f"cuda:{local % torch.cuda.device_count()}" if torch.cuda.is_available() else "cpu"
