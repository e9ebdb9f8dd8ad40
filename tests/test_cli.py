import subprocess
import sys

from judgekit.cli import main


def test_help_lists_commands(capsys):
    rc = main([])
    out = capsys.readouterr().out
    assert rc == 2
    assert "usage: judgekit" in out


def test_module_entry_point_runs():
    proc = subprocess.run([sys.executable, "-m", "judgekit", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0
    assert proc.stdout.startswith("judgekit ")


def test_help_and_parser_do_not_import_torch():
    """`judgekit --help` must start fast: commands import torch/transformers only when they run."""
    import subprocess
    import sys
    from pathlib import Path

    repo = str(Path(__file__).resolve().parents[1])
    code = ("import sys, judgekit.cli as c\nc.build_parser()\n"
            "print(sorted(m for m in ('torch', 'transformers', 'datasets') if m in sys.modules))\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": repo}
    out = subprocess.run([sys.executable, "-c", code], cwd=repo, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    helped = subprocess.run([sys.executable, "-m", "judgekit", "--help"], cwd=repo, env=env, capture_output=True,
                            text=True)
    assert helped.returncode == 0 and "generate" in helped.stdout


# ------------------------------------------------------------------------------------------------------------
# Bad input, each reproduction of issue #23: one `judgekit: error:` line naming the problem, exit code 2.

import pytest  # noqa: E402

from judgekit.pocket import POCKET_DIR  # noqa: E402

POCKET = ["--task", "pocket-math", "--target", "pocket-target", "--draft", "pocket-draft", "--rule", "lossless"]
_CONFIG_HEAD = 'task = "pocket-math"\ntarget = "pocket-target"\ndraft = "pocket-draft"\nrule = ["cos"]\nout = "o"\n'
_HAVE_POCKET = (POCKET_DIR / "target" / "model.safetensors").exists()


def _another_eval(tmp):
    from judgekit.store.records import RecordWriter

    RecordWriter(tmp / "other", {"task": "pocket-code", "target": "t", "draft": "d", "max_new_tokens": 9})
    return ["eval", *POCKET, "--out", str(tmp / "other"), "--dry-run"]


def _config(body, head=_CONFIG_HEAD):
    def make(tmp):
        (tmp / "c.toml").write_text(head + body)
        return ["eval", "--config", str(tmp / "c.toml"), "--dry-run"]
    return make


def _mined_dir(tmp):
    (tmp / "mined").mkdir()
    (tmp / "mined" / "manifest.json").write_text("{}")
    return ["analyze", "--pairs", "4", "--vocab", "8", "--out", str(tmp / "mined")]


def _file(tmp):
    (tmp / "f").write_text("x")
    return ["analyze", "--pairs", "4", "--vocab", "8", "--out", str(tmp / "f")]


REPRODUCTIONS = {
    "config seeds abc": (_config('seeds = ["abc"]\n'), "setting 'seeds' must be an integer, got 'abc'"),
    "config table for a number": (_config("[temperature]\nx = 1\n"), "setting 'temperature' must be a number"),
    "config table in a list": (_config("lam = [{a = 1}]\n"), "setting 'lam' must be a number"),
    "config bool for an integer": (_config("limit = true\n"), "setting 'limit' must be an integer"),
    "config string for a number": (_config('top_p = "0.9"\n'), "setting 'top_p' must be a number"),
    "config out of range": (_config("block_size = [8, 0]\n"), "setting 'block_size' must be an integer in [1, inf)"),
    "config rule range": (_config("lam = [1.5]\n"), "lambda must be in [0, 1], got 1.5"),
    "config unknown rule": (_config("", _CONFIG_HEAD.replace('rule = ["cos"]', 'rules = ["nope"]')),
                            "setting 'rule' must be one of lossless"),
    "config key twice": (_config('rules = ["cos"]\n'), "setting 'rule' is given twice"),
    "config unknown key in a sweep": (_config("[[sweep]]\nrulez = [\"cos\"]\n"), "unknown setting 'rulez'"),
    "analyze --out a file": (_file, "is a file"),
    "analyze --out a mined dir": (_mined_dir, "not an earlier analysis"),
    "analyze --seed -1": (lambda tmp: ["analyze", "--pairs", "4", "--vocab", "8", "--seed", "-1"],
                          "--seed must be >= 0"),
    "plot --out x.xyz": (lambda tmp: ["plot", str(tmp), "--out", str(tmp / "x.xyz")], "give an image file ending"),
    "plot --out DIR": (lambda tmp: ["plot", str(tmp), "--out", str(tmp)], "is a directory"),
    "dry run block size 0": (lambda tmp: ["eval", *POCKET, "--out", str(tmp / "o"), "--block-size", "8,0",
                                          "--dry-run"], "--block-size must be an integer in [1, inf), got 0"),
    "dry run temperature -1": (lambda tmp: ["eval", *POCKET, "--out", str(tmp / "o"), "--temperature", "0,-1",
                                            "--dry-run"], "--temperature must be a number in [0, inf)"),
    "dry run top-k 0": (lambda tmp: ["eval", *POCKET, "--out", str(tmp / "o"), "--top-k", "0", "--dry-run"],
                        "--top-k must be an integer in [1, inf), got 0"),
    "dry run batch size 0": (lambda tmp: ["eval", *POCKET, "--out", str(tmp / "o"), "--batch-size", "0",
                                          "--dry-run"], "--batch-size must be an integer in [1, inf), got 0"),
    "dry run --out of another evaluation": (_another_eval, "holds another evaluation"),
    "unknown rule": (lambda tmp: ["eval", *POCKET[:-1], "nope", "--out", "o"], "unknown rule 'nope'"),
}


@pytest.mark.parametrize("name", list(REPRODUCTIONS))
def test_bad_input_is_one_error_line_and_exit_2(name, tmp_path, capsys, monkeypatch):
    make, expected = REPRODUCTIONS[name]
    monkeypatch.chdir(tmp_path)
    argv = make(tmp_path)
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("judgekit: error: "), err
    assert expected in lines[0]
    assert not (tmp_path / "o").exists()  # a refused run writes nothing


@pytest.mark.skipif(not _HAVE_POCKET, reason="pocket models not trained")
def test_generate_refuses_a_budget_past_the_models_positions(capsys):
    argv = ["generate", "--target", "pocket-target", "--draft", "pocket-draft", "--prompt", "1 + 2 =",
            "--device", "cpu", "--max-new-tokens", "700"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("judgekit: error:") == 1 and "Traceback" not in err
    assert err.strip().splitlines()[-1].endswith("run past the models' 512 positions")


@pytest.mark.skipif(not _HAVE_POCKET, reason="pocket models not trained")
@pytest.mark.parametrize("case", ["top-k 0", "judge for another model"])
def test_a_refused_eval_writes_nothing_and_the_valid_run_goes_on(case, tmp_path, capsys):
    """Refused after the settings were read (a real run, not a dry run): no eval.json locks --out, so the
    next, valid run in the same directory goes ahead."""
    import torch

    from judgekit.judge.head import LinearJudge

    out = tmp_path / "o"
    base = [*POCKET, "--out", str(out), "--limit", "1", "--max-new-tokens", "8", "--threads", "1", "--quiet"]
    if case == "top-k 0":
        bad = ["eval", *base, "--top-k", "0"]
    else:
        LinearJudge(torch.zeros(8), torch.tensor(0.0), torch.zeros(8), torch.ones(8),
                    {"layer": -1, "features": "target"}).save(tmp_path / "j8")
        bad = ["eval", *base, "--rule", "judge", "--judge", str(tmp_path / "j8")]
    assert main(bad) == 2
    err = capsys.readouterr().err
    assert err.count("judgekit: error:") == 1 and "Traceback" not in err
    assert not out.exists()
    assert main(["eval", *base]) == 0
    assert (out / "eval.json").is_file()
