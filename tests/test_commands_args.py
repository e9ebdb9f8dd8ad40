"""The shared argument declarations (judgekit/commands/_args.py): every command declares its model pair
through `add_model_args`, each keeps its own defaults, and `judgekit generate` reads a judge once."""

from __future__ import annotations

import argparse

import pytest

from judgekit.cli import build_parser, main
from judgekit.pocket import POCKET_DIR


def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(command path, parser) for every parser and sub-parser of the CLI."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, path + (name,))


def _option(parser: argparse.ArgumentParser, flag: str):
    return next((a for a in parser._actions if flag in a.option_strings), None)


def test_every_model_pair_is_declared_by_the_shared_helper():
    seen = []
    for path, parser in _parsers(build_parser()):
        target, draft = _option(parser, "--target"), _option(parser, "--draft")
        if target is None:
            assert draft is None, path
            continue
        seen.append(" ".join(path))
        assert "hub id, local directory or pocket-target" in target.help, path
        assert "hub id, local directory or pocket-draft" in draft.help, path
        dtype = _option(parser, "--dtype")
        if dtype is not None:
            assert dtype.choices == ["auto", "bf16", "fp16", "fp32"], path
            assert _option(parser, "--device") is not None, path
    assert {"generate", "eval", "mine", "analyze", "bench decode", "bench mine", "bench eval",
            "pocket eval"} <= set(seen)


@pytest.mark.parametrize("argv, expected", [
    (["generate", "--target", "t", "--draft", "d", "--prompt", "x"],
     {"target": "t", "draft": "d", "device": "auto", "dtype": "auto"}),
    (["mine", "--task", "pocket-math", "--target", "t", "--draft", "d", "--out", "o"],
     {"target": "t", "draft": "d", "device": "auto", "dtype": "auto"}),
    (["analyze"], {"target": None, "draft": None, "device": "auto", "dtype": "auto"}),
    (["bench", "decode"], {"target": None, "draft": None, "device": "auto", "dtype": "auto"}),
    (["bench", "mine"], {"target": "pocket-target", "draft": "pocket-draft", "device": "auto", "dtype": "auto"}),
    (["bench", "eval"], {"target": "pocket-target", "draft": "pocket-draft", "device": "auto", "dtype": "auto"}),
    (["pocket", "eval"], {"target": "pocket-target", "draft": "pocket-draft"}),
    # eval: None means "not given", so a config file's value holds.
    (["eval"], {"target": None, "draft": None, "device": None, "dtype": None}),
])
def test_each_command_keeps_its_defaults(argv, expected):
    args = vars(build_parser().parse_args(argv))
    assert {k: args[k] for k in expected} == expected
    if argv[0] == "pocket":
        assert "device" not in args and "dtype" not in args  # the pocket evaluation runs where it trains: CPU


@pytest.mark.parametrize("argv", [["generate", "--prompt", "x", "--draft", "d"],
                                  ["mine", "--task", "t", "--out", "o", "--target", "t"]])
def test_required_pairs_are_required(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(argv)
    assert exc.value.code == 2
    assert "--" in capsys.readouterr().err


def test_a_bad_dtype_is_refused_everywhere(capsys):
    for argv in (["generate", "--target", "t", "--draft", "d", "--prompt", "x"], ["bench", "mine"], ["analyze"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(argv + ["--dtype", "int8"])
        assert "invalid choice: 'int8'" in capsys.readouterr().err


@pytest.mark.skipif(not (POCKET_DIR / "target" / "model.safetensors").exists(), reason="pocket models not trained")
def test_generate_reads_the_judge_once(tmp_path, monkeypatch, capsys):
    """`generate` validates the rule before loading the models and binds it after: one read of the judge."""
    import safetensors.torch
    import torch

    from judgekit.judge.head import WEIGHTS_NAME, LinearJudge
    from judgekit.models import load_model_pair

    pair = load_model_pair("pocket-target", "pocket-draft", device="cpu", dtype="fp32")
    h = pair.target.config.hidden_size
    config = {"schema_version": 2, "layer": -1, "features": "target", "hidden_size": h, "draft_hidden_size": None,
              "target_model": "pocket-target", "draft_model": "pocket-draft"}
    LinearJudge(torch.zeros(h), torch.tensor(-20.0), torch.zeros(h), torch.ones(h), config).save(tmp_path / "j")
    reads = []
    original = safetensors.torch.load_file

    def counting(filename, *args, **kwargs):
        if str(filename).endswith(WEIGHTS_NAME):
            reads.append(filename)
        return original(filename, *args, **kwargs)

    monkeypatch.setattr(safetensors.torch, "load_file", counting)
    assert main(["generate", "--target", "pocket-target", "--draft", "pocket-draft", "--prompt", "1 + 2 =",
                 "--rule", "judge", "--judge", str(tmp_path / "j"), "--device", "cpu", "--dtype", "fp32",
                 "--max-new-tokens", "4", "--json"]) == 0
    assert len(reads) == 1, reads
    assert '"text"' in capsys.readouterr().out
