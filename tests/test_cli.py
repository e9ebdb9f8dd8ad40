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
