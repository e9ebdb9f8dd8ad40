"""The shipped pocket models are found both in a checkout (data/pocket) and in an installed wheel."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from judgekit.pocket import CHECKOUT_DIR, INSTALLED_DIR, POCKET_DIR, find_pocket_dir, pocket_model_path

REPO = Path(__file__).resolve().parents[1]


def _fake_pocket(root: Path) -> Path:
    for model in ("target", "draft"):
        (root / model).mkdir(parents=True)
        (root / model / "config.json").write_text("{}")
    return root


def test_checkout_uses_data_pocket_when_no_installed_copy(tmp_path):
    checkout = _fake_pocket(tmp_path / "repo" / "data" / "pocket")
    assert find_pocket_dir(tmp_path / "pkg" / "shipped", checkout) == checkout
    # in this checkout there is no installed copy, so the aliases point into the repository's data/pocket
    assert not INSTALLED_DIR.exists() and POCKET_DIR == CHECKOUT_DIR == REPO / "data" / "pocket"
    assert pocket_model_path("pocket-draft", checkout) == checkout / "draft"


def test_installed_copy_wins(tmp_path):
    installed = _fake_pocket(tmp_path / "site" / "judgekit" / "pocket" / "shipped")
    assert find_pocket_dir(installed, tmp_path / "nowhere") == installed
    assert find_pocket_dir(installed, _fake_pocket(tmp_path / "repo")) == installed


@pytest.mark.slow
@pytest.mark.skipif(not (CHECKOUT_DIR / "target" / "config.json").exists(), reason="no shipped pocket models")
def test_wheel_carries_the_models_and_finds_them_outside_the_checkout(tmp_path):
    pytest.importorskip("setuptools")
    pytest.importorskip("wheel")
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "judgekit", src / "judgekit", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(CHECKOUT_DIR, src / "data" / "pocket")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            "-w", str(tmp_path / "whl"), str(src)], capture_output=True, text=True, cwd=tmp_path)
    assert built.returncode == 0, built.stderr[-2000:]
    wheel = next((tmp_path / "whl").glob("judgekit-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for model in ("target", "draft"):
        for f in (CHECKOUT_DIR / model).iterdir():
            assert f"judgekit/pocket/shipped/{model}/{f.name}" in names
    assert "judgekit/commands/sandbox.py" in names and "judgekit/tasks/__init__.py" in names
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = ("import judgekit.pocket as p\nt = p.pocket_model_path('pocket-target')\n"
            "print(p.__file__)\nprint(t)\nprint((t / 'model.safetensors').is_file())\n")
    # run from elsewhere with the unpacked wheel first on the path (ahead of any editable install of judgekit)
    run = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(site)!r})\n" + code],
                         capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    module, target, has_weights = run.stdout.split()
    assert module.startswith(str(site)) and target == str(site / "judgekit" / "pocket" / "shipped" / "target")
    assert has_weights == "True"


def test_default_install_is_light_and_the_extras_are_pinned():
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    deps = " ".join(project["dependencies"]).lower()
    for heavy in ("evalplus", "openai", "anthropic", "google-generativeai", "protobuf"):
        assert heavy not in deps
    extras = project["optional-dependencies"]
    assert any(e.startswith("evalplus") for e in extras["code"])
    assert "onnx>=1.23" in extras["export"] and "onnxruntime>=1.20" in extras["export"]
    assert any(e.startswith("accelerate") for e in extras["sharded"])
    assert project["dynamic"] == ["version"]  # read from judgekit/_version.py
    make = (REPO / "Makefile").read_text()
    assert "--no-deps evalplus" in make and "appdirs tempdir wget psutil" in make  # CI still runs the code tasks


def test_code_tasks_without_evalplus_fail_in_one_line(monkeypatch, capsys):
    from judgekit.cli import main

    for name in [m for m in sys.modules if m == "evalplus" or m.startswith("evalplus.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "evalplus", None)  # `import evalplus...` now raises ImportError
    assert main(["eval", "--task", "mbpp+", "--target", "pocket-target", "--draft", "pocket-draft", "--rule",
                 "lossless", "--out", "unused", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("judgekit: error: tasks humaneval+ and mbpp+ need evalplus") and err.count("\n") == 1
    assert "pip install 'judgekit[code]'" in err
