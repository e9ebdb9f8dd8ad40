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
