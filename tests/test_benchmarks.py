"""judgekit/benchmarks: the controlled-agreement construction and both `judgekit bench` drivers, end to end on
tiny models (the speed figures themselves come from the benchmark runs, not from tests)."""

from __future__ import annotations

import re

import pytest
import torch

from judgekit.benchmarks.synthetic import make_controlled_pair, tiny_model
from judgekit.cli import main


@pytest.fixture(scope="module")
def tiny_pair_dirs(tiny_dirs):  # the shared tiny llama pair of tests/conftest.py
    return tiny_dirs


def test_controlled_pair_follows_the_permutation_and_sets_agreement():
    vocab = 400
    target = tiny_model("qwen2", vocab, hidden=64, layers=2, seed=0)
    draft = tiny_model("qwen2", vocab, hidden=32, layers=1, seed=1)
    succ = make_controlled_pair(target, draft, agreement=0.75, seed=3)
    ids = torch.arange(vocab)[None]
    with torch.no_grad():
        t_next = target(ids).logits[0].argmax(-1)
        d_next = draft(ids).logits[0].argmax(-1)
    assert torch.equal(t_next, succ)  # each position's argmax is the fixed successor of its own token
    agreement = (t_next == d_next).float().mean().item()
    assert 0.65 < agreement < 0.85, agreement


def test_bench_decode_runs_and_checks_identical_outputs(tiny_pair_dirs, capsys):
    target, draft = tiny_pair_dirs
    rc = main(["bench", "decode", "--target", str(target), "--draft", str(draft), "--prompts", "2",
               "--max-new-tokens", "6", "--block-size", "3", "--threads", "1", "--device", "cpu"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "outputs identical: True" in out
    for decoder in ("HF target-only", "HF assisted", "judgekit eager"):
        assert decoder in out


def test_bench_mine_compares_labels_with_the_reference(tiny_pair_dirs, capsys):
    target, draft = tiny_pair_dirs
    rc = main(["bench", "mine", "--target", str(target), "--draft", str(draft), "--problems", "2",
               "--max-new-tokens", "6", "--batch-size", "2", "--threads", "1", "--device", "cpu"])
    out = capsys.readouterr().out
    assert rc == 0, out
    agreed = re.search(r"label agreement: 1\.0000 \((\d+)/(\d+) mismatches\)", out)
    assert agreed and agreed[1] == agreed[2] and int(agreed[1]) > 0, out  # some mismatches, all labelled alike
