"""judgekit.dist: the process's place in a launch and the round-robin deal of work both mine and eval use."""

from __future__ import annotations

import pytest

from judgekit.dist import DistEnv, distributed_env, my_share, rank_device
from judgekit.errors import JudgekitError


def test_shares_are_disjoint_cover_everything_and_keep_order():
    items = list(range(11))
    shares = [my_share(items, r, 3) for r in range(3)]
    assert shares == [[0, 3, 6, 9], [1, 4, 7, 10], [2, 5, 8]]
    assert my_share(items, 0, 1) == items
    with pytest.raises(ValueError):
        my_share(items, 3, 3)


def test_environment_is_read_and_checked(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert distributed_env() == DistEnv(0, 1, 0)
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert distributed_env() == DistEnv(3, 4, 3)  # LOCAL_RANK defaults to the rank
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert distributed_env() == DistEnv(3, 4, 1)
    monkeypatch.setenv("RANK", "4")
    with pytest.raises(JudgekitError, match=r"RANK=4 is not in \[0, WORLD_SIZE=4\)"):
        distributed_env()
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(JudgekitError, match="RANK='x' is not an integer"):
        distributed_env()


def test_device_auto_gives_each_local_rank_its_gpu(monkeypatch):
    import torch

    assert rank_device("auto", DistEnv(0, 1, 0)) == "auto"  # a single process: the loader decides
    assert rank_device("cpu", DistEnv(1, 2, 1)) == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert [rank_device("auto", DistEnv(r, 4, r)) for r in range(4)] == ["cuda:0", "cuda:1", "cuda:0", "cuda:1"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert rank_device("auto", DistEnv(1, 2, 1)) == "auto"
