"""Saved judge heads: round trip, refusing corrupt ones and ones trained for another target."""

from __future__ import annotations

import json
import re

import pytest
import torch

from judgekit.errors import JudgekitError
from judgekit.judge.head import CONFIG_NAME, WEIGHTS_NAME, LinearJudge, check_judge_matches, load_judge


def _judge(hidden: int, seed: int = 0, target: str = "tiny-llama") -> LinearJudge:
    g = torch.Generator().manual_seed(seed)
    return LinearJudge(torch.randn(hidden, generator=g), torch.tensor(0.1), torch.randn(hidden, generator=g),
                       torch.rand(hidden, generator=g) + 0.5, {"target_model": target, "layer": -1})


def test_round_trip_gives_the_same_probabilities(tmp_path):
    judge = _judge(16)
    judge.save(tmp_path / "j")
    loaded = load_judge(tmp_path / "j")
    h = torch.randn(5, 16)
    torch.testing.assert_close(loaded(h, torch.zeros(5, dtype=torch.long)), judge(h, torch.zeros(5, dtype=torch.long)))
    manual = torch.sigmoid(((h - judge.mean) / judge.std) @ judge.weight + judge.bias)
    torch.testing.assert_close(judge(h, None), manual)
    assert json.loads((tmp_path / "j" / CONFIG_NAME).read_text())["hidden_size"] == 16


def test_corrupt_or_missing_judge_is_refused(tmp_path):
    with pytest.raises(JudgekitError, match="not a judge directory"):
        load_judge(tmp_path)
    _judge(8).save(tmp_path / "j")
    (tmp_path / "j" / WEIGHTS_NAME).write_bytes(b"garbage")
    with pytest.raises(JudgekitError, match="corrupt judge"):
        load_judge(tmp_path / "j")


def test_judge_for_another_model_is_refused():
    with pytest.raises(JudgekitError, match=re.escape("(hidden size 8) but the target 'x' has hidden size 64")):
        check_judge_matches(_judge(8), 64, "x")


def _generate(t, d, judge_dir, *extra) -> int:
    """`judgekit generate` with a judge, in process (the entry point itself is run by test_models.py)."""
    from judgekit.cli import main

    return main(["generate", "--target", str(t), "--draft", str(d), "--prompt", "Tom has", "--rule", "judge",
                 "--judge", str(judge_dir), "--device", "cpu", "--max-new-tokens", "12", "--json", *extra])


def test_cli_generate_with_a_judge(tiny_dirs, tmp_path, capsys):
    t, d = tiny_dirs
    keep_all = _judge(64, target=str(t))  # the tiny target's hidden size; P(important) = sigmoid(-20): every draft is kept
    keep_all.weight.zero_()
    keep_all.bias.fill_(-20.0)
    keep_all.save(tmp_path / "ok")
    assert _generate(t, d, tmp_path / "ok", "--judge-threshold", "0.5") == 0
    stats = json.loads(capsys.readouterr().out)["stats"]
    # Every drafted token is kept: 8 drafts + 1 bonus, then the last 3 tokens of the budget in one more step.
    assert stats["target_calls"] <= 2 and stats["accept_hist"][0] == 0
    _judge(32).save(tmp_path / "wrong")
    assert _generate(t, d, tmp_path / "wrong") == 2
    last = capsys.readouterr().err.splitlines()[-1]  # after the weight-loading progress bars
    assert last.startswith("judgekit: error: ") and "trained on tiny-llama (hidden size 32)" in last


def test_cli_generate_refuses_a_judge_for_another_target_of_the_same_size(tiny_dirs, tmp_path, capsys):
    from transformers import AutoConfig

    from judgekit.judge.head import config_fingerprint

    t, d = tiny_dirs
    _judge(64, target="another-model").save(tmp_path / "named")
    assert _generate(t, d, tmp_path / "named") == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith("judgekit: error: the judge was trained for target 'another-model'")
    other = AutoConfig.from_pretrained(t)
    other.rope_theta = 1234.0  # same sizes, another model
    judge = _judge(64, target=str(t))
    judge.config["target_config_sha256"] = config_fingerprint(other)
    judge.save(tmp_path / "fingerprint")
    assert _generate(t, d, tmp_path / "fingerprint") == 2
    assert "config differs" in capsys.readouterr().err.splitlines()[-1]
    judge.config["target_config_sha256"] = config_fingerprint(AutoConfig.from_pretrained(t))
    judge.save(tmp_path / "fingerprint")
    assert _generate(t, d, tmp_path / "fingerprint") == 0


def test_a_pocket_alias_and_its_directory_name_the_same_target():
    from judgekit.judge.head import _model_name
    from judgekit.pocket import pocket_model_path

    assert _model_name("pocket-target") == _model_name(str(pocket_model_path("pocket-target")))
    assert _model_name("pocket-target") != _model_name("pocket-draft")
