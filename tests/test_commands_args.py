"""The shared argument declarations (judgekit/commands/_args.py): every command declares its model pair
through `add_model_args`, each keeps its own defaults, and `judgekit generate` reads a judge once."""

from __future__ import annotations

import argparse

import pytest

from judgekit.cli import build_parser, main
from judgekit.errors import JudgekitError
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


# ------------------------------------------------------------------------------------------------------------
# Rule parameters: declared once (judgekit/decode/params.py); the rules' fields, describe(), every command's
# flags and the analysis grid read the declarations.


def test_each_rule_takes_its_fields_and_checks_from_the_declarations():
    from judgekit.decode.params import RULE_NAMES, RULE_SPECS
    from judgekit.decode.rules import RULES, make_rule

    assert list(RULES) == list(RULE_NAMES)
    for name, cls in RULES.items():
        spec = RULE_SPECS[name]
        fields = cls.param_fields()
        assert [f.name for f in fields] == [p.name for p in spec.params], name
        assert all(f.metadata["param"] is p and f.default == p.default for f, p in zip(fields, spec.params)), name
        extra = {"judge": lambda h, t: h} if spec.needs_judge else {}
        rule = make_rule(name, **extra)
        assert rule.describe() == {"rule": name, **{p.name: p.default for p in spec.params}}
        for p in spec.params:  # the declared range is the rule's: one value outside it is refused
            if p.interval:
                low = float(p.interval[1:-1].split(",")[0])
                bad = low if p.interval[0] == "(" else low - 1
                with pytest.raises(JudgekitError, match=p.what):
                    make_rule(name, **extra, **{p.name: bad})


def _parser(*path):
    return dict(_parsers(build_parser()))[path]


def test_every_command_declares_the_rule_flags_from_the_parameters():
    from judgekit.decode.params import RULE_NAMES, flag_params, rules_using

    generate, ev, analyze = _parser("generate"), _parser("eval"), _parser("analyze")
    for parser in (generate, ev, analyze):
        assert _option(parser, "--rule").choices == RULE_NAMES
    for p in flag_params():
        assert _option(generate, p.flag).default == p.default, p.key
        assert _option(ev, p.flag).default is None, p.key  # not given: a config file's value holds
        assert all(r in _option(ev, p.flag).help for r in rules_using(p.key))
        if p.key == "judge_threshold":  # needs a trained judge: not analysed in closed form
            assert _option(analyze, p.flag) is None
        else:
            assert _option(analyze, p.flag).default == list(p.grid), p.key
    # The documented spellings keep working, each to its rule's field.
    args = build_parser().parse_args(["eval", "--fuzzy-threshold", "0.1,0.2", "--judge-threshold", "p20,0.3",
                                      "--p-base", "0.2", "--lam", "0.5", "--divergence", "kl,tv"])
    assert (args.fuzzy_threshold, args.judge_threshold, args.p_base) == ([0.1, 0.2], ["p20", 0.3], [0.2])
    assert args.divergence == ["kl", "tv"]


def test_the_analysis_grid_and_the_sweep_expand_alike():
    """One expansion (params.combinations) serves `judgekit analyze` and `judgekit eval`."""
    from judgekit.evaluate.analysis import rule_grid
    from judgekit.evaluate.sweep import Sweep

    values = {"fuzzy_threshold": [0.1, 0.5], "divergence": ["kl", "js"], "lam": [0.3], "p_base": [0.2]}
    rules = rule_grid(["fuzzy", "cos", "minp"], values)
    points = Sweep(["fuzzy", "cos", "minp"], values).points()
    assert [r.describe() for r in rules] == [{"rule": p.rule, **p.params} for p in points]
    assert len(rules) == 4 + 1 + 1


def test_generate_passes_each_parameter_to_its_rule():
    from judgekit.commands.generate import build_rule

    args = build_parser().parse_args(["generate", "--target", "t", "--draft", "d", "--prompt", "x", "--rule",
                                      "fuzzy", "--fuzzy-threshold", "0.25", "--divergence", "js"])
    assert build_rule(args).describe() == {"rule": "fuzzy", "threshold": 0.25, "divergence": "js"}
    args.rule, args.epsilon, args.delta = "eta", 0.01, 0.5
    assert build_rule(args).describe() == {"rule": "eta", "epsilon": 0.01, "delta": 0.5}


# ------------------------------------------------------------------------------------------------------------
# --config for mine and train: the file's keys are the flags' destinations, checked like the flags.


@pytest.mark.parametrize("argv, body, expected", [
    (["mine", "--task", "t", "--target", "t", "--draft", "d", "--out", "o", "--batch-size", "3"],
     'max_new_tokens = 128\nbatch_size = 5\nlayers = "-1,12"\ndraft_features = true\n',
     {"max_new_tokens": 128, "batch_size": 3, "layers": "-1,12", "draft_features": True, "split": None}),
    (["train", "--data", "a", "--out", "o", "--lr", "0.5"], 'head = "mlp"\nlr = 0.1\nmax_epochs = 7\nmix = "9:1"\n',
     {"head": "mlp", "lr": 0.5, "max_epochs": 7, "mix": "9:1", "patience": 10}),
    # a flag given with its default value still wins over the file
    (["mine", "--task", "t", "--target", "t", "--draft", "d", "--out", "o", "--batch-size", "1"],
     "batch_size = 5\nmax_new_tokens = 64\n", {"batch_size": 1, "max_new_tokens": 64}),
    (["train", "--data", "a", "--out", "o", "--lr", "0.01", "--patience", "10"], "lr = 0.1\npatience = 3\n",
     {"lr": 0.01, "patience": 10}),
])
def test_mine_and_train_read_a_config_file_under_the_command_line(argv, body, expected, tmp_path):
    from judgekit.commands._args import with_config

    cfg = tmp_path / "c.toml"
    cfg.write_text(body)
    args = with_config(build_parser().parse_args([*argv, "--config", str(cfg)]))
    assert {k: getattr(args, k) for k in expected} == expected


@pytest.mark.parametrize("body, message", [
    ("max_new_tokens = 1.5\n", "setting 'max_new_tokens' must be an integer, got 1.5"),
    ('batch_size = "8"\n', "setting 'batch_size' must be an integer"),
    ("max_epochs = 3\n", "unknown setting 'max_epochs'"),
    ("draft_features = 1\n", "setting 'draft_features' must be true or false"),
])
def test_a_bad_mine_config_is_one_error_line(body, message, tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text(body)
    argv = ["mine", "--task", "pocket-math", "--target", "t", "--draft", "d", "--out", str(tmp_path / "o"),
            "--config", str(cfg)]
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("judgekit: error: ") and message in lines[0], lines
    assert not (tmp_path / "o").exists()


def test_a_bad_train_choice_in_its_config_is_refused(tmp_path):
    from judgekit.commands._args import with_config

    cfg = tmp_path / "c.yaml"
    cfg.write_text("head: cnn\n")
    args = build_parser().parse_args(["train", "--data", "a", "--out", "o", "--config", str(cfg)])
    with pytest.raises(JudgekitError, match="setting 'head' must be one of linear, mlp, got 'cnn'"):
        with_config(args)
