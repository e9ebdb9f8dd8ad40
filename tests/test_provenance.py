"""Provenance: the block itself (versions, commit, models, data hashes) and its presence in every artefact."""

from __future__ import annotations

import hashlib
import json
import subprocess
from importlib import metadata
from pathlib import Path

import pytest

from judgekit import __version__
from judgekit.cli import main
from judgekit.provenance import file_sha256, git_commit, library_versions, provenance, provenance_line

ROOT = Path(__file__).resolve().parents[1]


def test_block_names_version_commit_libraries_and_data(tmp_path):
    data = tmp_path / "problems.jsonl"
    data.write_bytes(b'{"question": "1+1", "answer": "2"}\n')
    block = provenance(models=(), data_files=[data, None, tmp_path / "absent.jsonl"])
    assert block["judgekit"]["version"] == __version__
    described = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty", "--tags"],
                               capture_output=True, text=True).stdout.strip()
    assert block["judgekit"]["commit"] == described and described
    assert block["libraries"]["torch"] == metadata.version("torch")
    assert block["libraries"]["transformers"] == metadata.version("transformers")
    assert block["data"] == {str(data): hashlib.sha256(data.read_bytes()).hexdigest(),
                             str(tmp_path / "absent.jsonl"): None}
    json.dumps(block)  # JSON-ready


def test_installed_copy_has_no_commit_and_missing_libraries_are_none(tmp_path):
    pkg = tmp_path / "site" / "judgekit"
    pkg.mkdir(parents=True)
    assert git_commit(pkg) is None
    assert library_versions(["torch", "no-such-distribution-xyz"]) == {"torch": metadata.version("torch"),
                                                                       "no-such-distribution-xyz": None}
    assert file_sha256(tmp_path) is None  # a directory is no data file


def test_loaded_models_carry_revision_commit_and_config_hash(tiny_dirs):
    from transformers import AutoConfig

    from judgekit.models import config_sha256, load_model_pair

    t, d = tiny_dirs
    block = provenance(models=("never-loaded/model",))
    assert block["models"]["never-loaded/model"]["loaded"] is False
    load_model_pair(str(t), str(d), "cpu", "fp32")
    block = provenance(models=(str(t), str(d)))
    info = block["models"][str(t)]
    assert info["loaded"] and info["revision"] is None and info["commit"] is None  # a local directory
    assert info["config_sha256"] == config_sha256(AutoConfig.from_pretrained(t))
    changed = AutoConfig.from_pretrained(t)
    changed.rope_theta = 1234.0
    assert config_sha256(changed) != info["config_sha256"]
    assert str(t) in provenance_line(block) and __version__ in provenance_line(block)


def test_mining_manifest_and_judge_config_carry_provenance(tmp_path):
    from judge_fixtures import write_mined

    mined = write_mined(tmp_path / "mined", "math", 40, seed=1)
    manifest = json.loads((mined / "manifest.json").read_text())
    assert manifest["provenance"]["judgekit"]["version"] == __version__
    assert set(manifest["provenance"]["models"]) == {"tiny-target", "tiny-draft"}
    assert main(["train", "--data", str(mined), "--out", str(tmp_path / "judge"), "--quiet", "--accelerator", "cpu",
                 "--devices", "1", "--max-epochs", "2"]) == 0
    config = json.loads((tmp_path / "judge" / "judge_config.json").read_text())
    prov = config["provenance"]
    assert prov["libraries"]["torch"] == metadata.version("torch")
    assert prov["data"] == {str(mined / "manifest.json"): file_sha256(mined / "manifest.json")}
    assert set(prov["models"]) == {"tiny-target", "tiny-draft"}


@pytest.mark.slow
def test_eval_manifest_and_summary_carry_provenance(tmp_path, capsys):
    out = tmp_path / "eval"
    assert main(["eval", "--task", "pocket-math", "--target", "pocket-target", "--draft", "pocket-draft",
                 "--threads", "1", "--max-new-tokens", "16", "--rule", "lossless", "--limit", "2", "--quiet",
                 "--out", str(out)]) == 0
    prov = json.loads((out / "eval.json").read_text())["provenance"]
    assert prov["judgekit"]["version"] == __version__
    assert prov["models"]["pocket-target"]["loaded"] and prov["models"]["pocket-target"]["config_sha256"]
    assert (out / "summary.md").read_text().rstrip().endswith(f"_Provenance: {provenance_line(prov)}._")
