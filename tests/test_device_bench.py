"""The GPU script `eval/device_bench.py` is run on a lent device machine with minutes of budget and no second
try, so it must not be found broken there: its CPU smoke mode runs every part (decode at batch 1 and 32 with
the tree, the miner) on the small cpu pair, and without that flag a machine with no CUDA is refused."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "eval" / "device_bench.py"


def _run(*args: str, timeout: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _summary(stdout: str) -> list[list[str]]:
    """The rows of the final summary table, split on whitespace."""
    lines = stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("setting"))
    return [line.split() for line in lines[head + 1:] if line.strip() and not line.startswith("[")]


@pytest.mark.slow
def test_the_cpu_smoke_run_times_every_part_and_every_output_agrees():
    out = _run("--smoke-cpu", timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "CPU smoke run: NOT GPU figures" in out.stdout
    assert "skipped" not in out.stdout  # every part ran within the budget
    rows = _summary(out.stdout)
    decoders = {" ".join(r[3:-3]) for r in rows if r[0] == "agree"}
    assert {"HF target-only", "HF assisted", "judgekit eager", "judgekit fast", "judgekit tree"} <= decoders
    assert {(r[1], r[2]) for r in rows if r[0] == "agree"} >= {("0.9", "1"), ("0.9", "32"), ("0.7", "1"), ("0.7", "32")}
    assert any(r[0] == "mine" for r in rows)
    assert all(r[-1] == "True" for r in rows), rows  # outputs identical to HF's, mined labels agree
    assert "label agreement: 1.0000" in out.stdout


def test_without_cuda_it_refuses_instead_of_printing_cpu_figures():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    out = _run(timeout=120)
    assert out.returncode == 2
    assert "CUDA is not available" in out.stdout
