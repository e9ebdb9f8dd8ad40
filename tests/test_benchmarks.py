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


def test_bench_eval_repeats_alternate_and_report_medians(tmp_path, monkeypatch):
    """Rounds run the batch sizes in rotated order (two sizes alternate; a slow spell falls on all); the report gives
    each batch size's median time."""
    import judgekit.evaluate.run as evaluation
    from judgekit.benchmarks.eval import run_eval_bench
    from judgekit.evaluate.sweep import EvalSettings, Sweep
    from judgekit.models import load_model_pair
    from judgekit.tasks import get_task

    order = []
    real = evaluation.run_eval

    def spy(*args, batch_size=1, **kwargs):
        order.append(batch_size)
        return real(*args, batch_size=batch_size, **kwargs)

    monkeypatch.setattr(evaluation, "run_eval", spy)
    pocket = load_model_pair("pocket-target", "pocket-draft", device="cpu", dtype="fp32")
    task = get_task("pocket-math")
    problems = task.load("test", limit=2)
    settings = EvalSettings("pocket-math", "pocket-target", "pocket-draft", limit=2, max_new_tokens=16)
    timings, identical = run_eval_bench(pocket, task, problems, Sweep(["lossless"]).points(), settings, [1, 2],
                                        str(tmp_path), repeats=3)
    assert order == [1, 2, 2, 1, 1, 2] and identical
    assert [t.batch_size for t in timings] == [1, 2] and all(t.problems == 2 and t.cpu_s > 0 for t in timings)
    assert len(list(tmp_path.iterdir())) == 6


def test_bench_decode_rounds_rotate_and_report_medians():
    """Decoders run in interleaved rounds (each in every slot over the rounds) and each Timing is the median
    round, not the sum or the last one."""
    from judgekit.benchmarks.decode import interleaved_rounds, round_order

    assert [round_order(["a", "b", "c"], r) for r in range(4)] == [
        ["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]
    calls, clock = [], iter([5.0, 1.0, 2.0, 9.0, 3.0, 4.0])  # a: 5, 9, 3 -> median 5; b: 1, 2, 4 -> 2

    def run_one(fn):
        calls.append(fn())
        secs = next(clock)
        return secs, secs / 2, [[1, 2, 3]]

    timings, outputs = interleaved_rounds({"a": lambda: "a", "b": lambda: "b"}, run_one, 3)
    assert calls == ["a", "b", "b", "a", "a", "b"]
    assert (timings["a"].seconds, timings["a"].cpu_seconds) == (5.0, 2.5)
    assert (timings["b"].seconds, timings["b"].cpu_seconds) == (2.0, 1.0)
    assert timings["a"].new_tokens == 3 and len(outputs["a"]) == 3
