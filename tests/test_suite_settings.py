"""The suite's own settings: `make test` (what CI runs through .ci/run) runs every test, the slow ones too.

The `slow` marker only lets a developer deselect the long integration tests locally (`-m "not slow"`)."""

from __future__ import annotations

import shlex
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_make_test_and_the_pytest_settings_deselect_nothing():
    make = (ROOT / "Makefile").read_text()
    recipe = make.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert "-m pytest" in recipe
    pytest_args = recipe.split("-m pytest", 1)[1]
    options = (ROOT / "pyproject.toml").read_text()
    pytest_cfg = tomllib.loads(options)["tool"]["pytest"]["ini_options"]
    for args in (shlex.split(pytest_args), shlex.split(pytest_cfg.get("addopts", ""))):
        assert not {"-m", "-k", "--deselect", "--ignore"} & set(args), args
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    assert any(m.startswith("slow:") for m in pytest_cfg["markers"])
