"""Hardened judges: hashed weights, validated configs, atomic judge directories, target identity, the hub,
resumable training, and one `judgekit: error:` line (exit 2) for every bad input."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from judge_fixtures import write_mined

from judgekit.cli import main
from judgekit.errors import JudgekitError
from judgekit.judge import data as jd
from judgekit.judge.head import (CARD_NAME, CONFIG_NAME, FOREIGN_ENV, WEIGHTS_NAME, LinearJudge, check_judge_matches,
                                 config_fingerprint, load_judge)
from judgekit.judge.train import TrainConfig, train_one, work_dir

ROOT = Path(__file__).resolve().parents[1]
QUIET = dict(progress=False, accelerator="cpu", devices=1, quiet=True)
TRAIN = ["--layer", "1", "--accelerator", "cpu", "--devices", "1", "--quiet"]


def _judge(path: Path, hidden: int = 8, seed: int = 0, **config) -> Path:
    g = torch.Generator().manual_seed(seed)
    config = {"schema_version": 3, "layer": -1, "features": "target", "target_model": "pocket-target",
              "thresholds": {"p20": 0.2, "p80": 0.8}, **config}
    LinearJudge(torch.randn(hidden, generator=g), torch.tensor(0.1), torch.randn(hidden, generator=g),
                torch.rand(hidden, generator=g) + 0.5, config).save(path)
    return path


@pytest.fixture(scope="module")
def mined(tmp_path_factory):
    root = tmp_path_factory.mktemp("mined")
    return write_mined(root / "a", "math", 60, seed=1), write_mined(root / "c", "code", 40, seed=2)


# ------------------------------------------------------------------------------------------ weights hash


def _tensor_data_span(path: Path) -> tuple[int, int]:
    """(start, end) of the tensor bytes of a safetensors file (after its 8-byte length and JSON header)."""
    raw = path.read_bytes()
    return 8 + int.from_bytes(raw[:8], "little"), len(raw)


@pytest.mark.parametrize("where", [0.0, 0.13, 0.5, 0.77, 1.0])
def test_every_flipped_bit_of_the_tensor_data_is_refused(tmp_path, where):
    jdir = _judge(tmp_path / "j")
    weights = jdir / WEIGHTS_NAME
    lo, hi = _tensor_data_span(weights)
    offset = min(hi - 1, lo + int(where * (hi - lo)))
    raw = bytearray(weights.read_bytes())
    raw[offset] ^= 1 << (offset % 8)
    weights.write_bytes(bytes(raw))
    with pytest.raises(JudgekitError, match=f"corrupt judge weights {weights}"):
        load_judge(jdir)


def test_the_hash_is_recorded_and_checked_and_a_clean_judge_loads(tmp_path):
    import hashlib

    jdir = _judge(tmp_path / "j")
    config = json.loads((jdir / CONFIG_NAME).read_text())
    assert config["weights_sha256"] == hashlib.sha256((jdir / WEIGHTS_NAME).read_bytes()).hexdigest()
    assert load_judge(jdir).config["weights_sha256"] == config["weights_sha256"]


# ------------------------------------------------------------------------------------------ config checks


@pytest.mark.parametrize("edit, msg", [
    ({"thresholds": {"p20": "abc"}}, "thresholds must be"),
    ({"thresholds": {"p20": 1.5}}, "thresholds must be"),
    ({"schema_version": 99}, "unknown schema_version 99"),
    ({"schema_version": "3"}, "unknown schema_version"),
    ({"layer": "last"}, "layer must be an integer"),
    ({"hidden_size": True}, "hidden_size must be"),
    ({"features": "draft"}, "features must be"),
    ({"weights_sha256": None}, "weights_sha256 must be"),
])
def test_bad_configs_are_refused_naming_the_file(tmp_path, edit, msg):
    jdir = _judge(tmp_path / "j")
    config = json.loads((jdir / CONFIG_NAME).read_text()) | edit
    (jdir / CONFIG_NAME).write_text(json.dumps(config))
    with pytest.raises(JudgekitError, match=f"invalid judge config {jdir / CONFIG_NAME}: {msg}"):
        load_judge(jdir)


def test_schema_3_without_a_hash_is_refused_and_an_old_judge_still_loads(tmp_path):
    jdir = _judge(tmp_path / "j")
    config = json.loads((jdir / CONFIG_NAME).read_text())
    del config["weights_sha256"]
    (jdir / CONFIG_NAME).write_text(json.dumps(config))
    with pytest.raises(JudgekitError, match="schema 3 needs weights_sha256"):
        load_judge(jdir)
    config["schema_version"] = 2  # written before hashes existed: loads, unchecked
    (jdir / CONFIG_NAME).write_text(json.dumps(config))
    assert load_judge(jdir).feature_size == 8


# ------------------------------------------------------------------------------------- atomic directories


def test_a_failed_save_leaves_the_old_judge_whole(tmp_path, monkeypatch):
    jdir = _judge(tmp_path / "j", seed=0)
    before = {p.name: p.read_bytes() for p in jdir.iterdir()}
    import safetensors.torch

    def dies_after_the_weights(tensors, filename, *a, **k):
        original(tensors, filename, *a, **k)
        raise KeyboardInterrupt  # as if killed between the weights and the config

    original = safetensors.torch.save_file
    monkeypatch.setattr(safetensors.torch, "save_file", dies_after_the_weights)
    with pytest.raises(KeyboardInterrupt):
        _judge(jdir, seed=1)
    assert {p.name: p.read_bytes() for p in jdir.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["j"]  # no temporary directory left


def test_a_killed_writers_temporary_directory_is_swept(tmp_path):
    jdir = _judge(tmp_path / "j")
    stale = tmp_path / ".j.new-999999999-deadbeef"  # a pid above any pid_max: its owner is dead
    stale.mkdir()
    (stale / WEIGHTS_NAME).write_bytes(b"half")
    _judge(jdir, seed=2)
    assert not stale.exists() and load_judge(jdir).feature_size == 8


def test_save_refuses_to_replace_a_directory_that_is_not_a_judge(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "precious.txt").write_text("x")
    with pytest.raises(JudgekitError, match="not a judge; refusing to replace it"):
        _judge(tmp_path / "data")
    assert (tmp_path / "data" / "precious.txt").read_text() == "x"


def test_the_card_describes_the_judge(mined, tmp_path):
    out = tmp_path / "j"
    assert main(["train", "--data", str(mined[0]), "--out", str(out), "--max-epochs", "3", *TRAIN]) == 0
    card = (out / CARD_NAME).read_text()
    config = json.loads((out / CONFIG_NAME).read_text())
    assert "tiny-target" in card and "tiny-draft" in card and "hidden_states[1]" in card
    assert f"{config['metrics']['auroc']:.4f}" in card and "| recall90 |" in card
    assert config["weights_sha256"] in card and "math" in card and str(mined[0]) in card


# ------------------------------------------------------------------------------------------ target identity


def _tiny_config(**kw):
    from transformers import LlamaConfig

    return LlamaConfig(hidden_size=8, intermediate_size=16, num_hidden_layers=2, num_attention_heads=2,
                       vocab_size=32, **kw)


def test_fingerprint_ignores_where_the_config_came_from_but_not_what_it_says():
    a, b = _tiny_config(), _tiny_config()
    b._name_or_path, b.transformers_version, b.use_cache = "/elsewhere/model", "0.0.1", False
    assert config_fingerprint(a) == config_fingerprint(b)
    assert config_fingerprint(a) != config_fingerprint(_tiny_config(rope_theta=1234.0))


def test_a_judge_for_another_target_of_the_same_hidden_size_is_refused(tmp_path, monkeypatch):
    mine = _tiny_config()
    judge = load_judge(_judge(tmp_path / "j", target_config_sha256=config_fingerprint(mine),
                              target_model="org/tiny-llama"))
    check_judge_matches(judge, 8, "/models/tiny-llama", target_config=mine)  # same model elsewhere: fine
    with pytest.raises(JudgekitError, match=f"trained for target 'org/tiny-llama', not 'other'; set {FOREIGN_ENV}=1"):
        check_judge_matches(judge, 8, "other", target_config=mine)
    with pytest.raises(JudgekitError, match="config differs"):
        check_judge_matches(judge, 8, "tiny-llama", target_config=_tiny_config(rope_theta=1234.0))
    monkeypatch.setenv(FOREIGN_ENV, "1")  # the documented override
    check_judge_matches(judge, 8, "other", target_config=_tiny_config(rope_theta=1234.0))
    with pytest.raises(JudgekitError, match="hidden size"):  # sizes must fit all the same
        check_judge_matches(judge, 16, "other")


def test_train_records_the_target_config_fingerprint(tmp_path):
    from judgekit.models import resolve_model_path
    from transformers import AutoConfig

    d = write_mined(tmp_path / "m", "math", 40, seed=3, target="pocket-target", hidden=16)
    sources, split, spec = jd.prepare([str(d)], layer=1)
    data = jd.build_data(sources, jd.select(sources, split, "1", (1.0,), None, "problems"), spec)
    res = train_one(data, TrainConfig(max_epochs=1, **QUIET), None, echo=lambda *_: None)
    want = config_fingerprint(AutoConfig.from_pretrained(resolve_model_path("pocket-target")))
    assert res.config["target_config_sha256"] == want


# ---------------------------------------------------------------------------------------------------- hub


class FakeHub:
    """A model hub in a directory: `upload_folder` copies into it, `snapshot_download` copies out of it."""

    def __init__(self, root: Path):
        self.root, self.cache = root / "hub", root / "cache"

    def api(self):
        hub = self

        class Api:
            def create_repo(self, repo_id, repo_type="model", private=False, exist_ok=False):
                (hub.root / repo_id).mkdir(parents=True, exist_ok=exist_ok)

            def upload_folder(self, folder_path, repo_id, repo_type="model", commit_message="", ignore_patterns=()):
                dest = hub.root / repo_id
                for f in Path(folder_path).rglob("*"):
                    if f.is_file() and not any(part.startswith(".") for part in f.relative_to(folder_path).parts):
                        (dest / f.relative_to(folder_path)).parent.mkdir(parents=True, exist_ok=True)
                        shutil.copyfile(f, dest / f.relative_to(folder_path))
                return f"hub://{repo_id}/commit/1"

        return Api

    def snapshot_download(self, repo_id, revision=None, **_):
        src = self.root / repo_id
        if not src.is_dir():
            raise FileNotFoundError(f"Repository Not Found for url: hub://{repo_id}")
        dest = self.cache / repo_id.replace("/", "--") / (revision or "main")
        shutil.copytree(src, dest, dirs_exist_ok=True)
        return str(dest)


@pytest.fixture
def hub(tmp_path, monkeypatch):
    import huggingface_hub

    fake = FakeHub(tmp_path)
    monkeypatch.setattr(huggingface_hub, "HfApi", fake.api())
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake.snapshot_download)
    return fake


def test_a_pushed_and_pulled_judge_is_byte_identical(mined, tmp_path, hub, capsys, monkeypatch):
    out = tmp_path / "j"
    assert main(["train", "--data", str(mined[0]), "--out", str(out), "--max-epochs", "2", *TRAIN]) == 0
    assert main(["judge", "push", str(out), "me/tiny-judge"]) == 0
    assert "me/tiny-judge" in capsys.readouterr().out
    monkeypatch.chdir(tmp_path)  # no local directory me/tiny-judge: the id is a hub repo
    pulled = Path(hub.snapshot_download("me/tiny-judge"))
    files = lambda d: {str(p.relative_to(d)): p.read_bytes() for p in d.rglob("*") if p.is_file()}  # noqa: E731
    assert files(pulled) == files(out) and CARD_NAME in files(pulled)
    assert load_judge("me/tiny-judge").config == load_judge(out).config
    assert main(["judge", "show", "me/tiny-judge"]) == 0 and "hidden_states[1]" in capsys.readouterr().out
    assert main(["judge", "show", "me/missing"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("judgekit: error: me/missing is neither a local judge directory nor a judge on the hub")


def test_a_corrupt_judge_is_never_pushed(tmp_path, hub, capsys):
    jdir = _judge(tmp_path / "j")
    raw = bytearray((jdir / WEIGHTS_NAME).read_bytes())
    raw[-1] ^= 0x10
    (jdir / WEIGHTS_NAME).write_bytes(bytes(raw))
    assert main(["judge", "push", str(jdir), "me/bad"]) == 2
    assert "corrupt judge weights" in capsys.readouterr().err and not (hub.root / "me" / "bad").exists()


# ------------------------------------------------------------------------------------ data: sources


def test_the_same_directory_twice_adds_no_rows(mined):
    a = str(mined[0])
    once = jd.prepare([a], seed=0)
    twice = jd.prepare([f"{a},{a}"], seed=0)
    sel1 = jd.select(*once[:2], "1", (1.0,), None, "mismatches")
    sel2 = jd.select(*twice[:2], "1", (1.0,), None, "mismatches")
    assert twice[0][0].duplicates == once[0][0].rows and once[0][0].duplicates == 0
    assert sel2.budget == sel1.budget and [len(r) for r in sel2.val_rows] == [len(r) for r in sel1.val_rows]
    assert sel2.realised[0]["duplicate_rows_dropped"] == once[0][0].rows
    d1 = jd.build_data(once[0], sel1, once[2])
    d2 = jd.build_data(twice[0], sel2, twice[2])
    np.testing.assert_array_equal(np.sort(d1.y_val), np.sort(d2.y_val))
    assert len(d2.y_train) == len(d1.y_train)


# -------------------------------------------------------------------------------- one line, exit 2


def _bad_cases(tmp_path: Path, mined) -> dict[str, tuple[list[str], str]]:
    a, c = map(str, mined)
    judge = _judge(tmp_path / "judge", hidden=64)
    flipped = _judge(tmp_path / "flipped")
    raw = bytearray((flipped / WEIGHTS_NAME).read_bytes())
    raw[len(raw) // 2] ^= 4
    (flipped / WEIGHTS_NAME).write_bytes(bytes(raw))
    bad_threshold = _judge(tmp_path / "badthr")
    cfg = json.loads((bad_threshold / CONFIG_NAME).read_text()) | {"thresholds": {"p20": "abc"}}
    (bad_threshold / CONFIG_NAME).write_text(json.dumps(cfg))
    future = _judge(tmp_path / "future")
    (future / CONFIG_NAME).write_text(json.dumps(json.loads((future / CONFIG_NAME).read_text()) | {"schema_version": 7}))
    evaldir = tmp_path / "ev"
    evaldir.mkdir()
    (evaldir / "eval.json").write_text("{}")
    existing = _judge(tmp_path / "existing")
    (tmp_path / "parent-file").write_text("x")
    gen = ["generate", "--target", "pocket-target", "--draft", "pocket-draft", "--prompt", "x", "--rule", "judge",
           "--device", "cpu", "--judge"]
    train = ["train", "--max-epochs", "1", *TRAIN]
    return {
        "export to a directory": (["export", str(judge), "--format", "torchscript", "--out", str(tmp_path)],
                                  "is a directory"),
        "export under a file": (["export", str(judge), "--format", "torchscript", "--out",
                                 str(tmp_path / "parent-file" / "j.pt")], "cannot create the directory"),
        "export of a flipped judge": (["export", str(flipped), "--format", "torchscript", "--out",
                                       str(tmp_path / "x.pt")], "corrupt judge weights"),
        "generate with a non-numeric threshold": ([*gen, str(bad_threshold)], "thresholds must be"),
        "generate with a flipped judge": ([*gen, str(flipped)], "corrupt judge weights"),
        "a judge from a newer judgekit": ([*gen, str(future)], "unknown schema_version 7"),
        "mlp hidden 0": ([*train, "--data", a, "--out", str(tmp_path / "m0"), "--head", "mlp", "--mlp-hidden", "0"],
                         "--mlp-hidden must be >= 1"),
        "train into an eval dir": ([*train, "--data", a, "--out", str(evaldir)], "evaluation directory"),
        "train into a mined dir": ([*train, "--data", a, "--out", c], "mining directory"),
        "train over a judge": ([*train, "--data", a, "--out", str(existing)], "pass --force"),
        "train a mixed-task source": ([*train, "--data", f"{a},{c}", "--out", str(tmp_path / "mix")],
                                      "mixes tasks code, math in one source"),
        "train with --resume and --force": ([*train, "--data", a, "--out", str(tmp_path / "rf"), "--resume",
                                            "--force"], "not both"),
    }


CASES = ["export to a directory", "export under a file", "export of a flipped judge",
         "generate with a non-numeric threshold", "generate with a flipped judge", "a judge from a newer judgekit",
         "mlp hidden 0", "train into an eval dir", "train into a mined dir", "train over a judge",
         "train a mixed-task source", "train with --resume and --force"]


@pytest.mark.parametrize("case", CASES)
def test_every_bad_input_is_one_error_line_and_exit_2(case, tmp_path, mined, capsys):
    argv, msg = _bad_cases(tmp_path, mined)[case]
    capsys.readouterr()
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("judgekit: error: ") and msg in err[0], captured.err
    assert "Traceback" not in captured.out


def test_force_replaces_a_judge(mined, tmp_path):
    out = _judge(tmp_path / "j")
    assert main(["train", "--data", str(mined[0]), "--out", str(out), "--max-epochs", "1", "--force", *TRAIN]) == 0
    assert load_judge(out).config["target_model"] == "tiny-target"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["j"]  # no work or temporary directory left


# -------------------------------------------------------------------------------------- resume, loggers


def _data(d):
    sources, split, spec = jd.prepare([str(d)], layer=1)
    return jd.build_data(sources, jd.select(sources, split, "1", (1.0,), None, "problems"), spec)


def _weights(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(path / WEIGHTS_NAME))


def test_an_interrupted_run_refuses_without_resume_and_resumes_to_the_same_judge(mined, tmp_path, monkeypatch):
    from judgekit.judge import train as tj

    data = _data(mined[0])
    cfg = TrainConfig(max_epochs=8, patience=8, batch_size=32, **QUIET)
    whole = train_one(data, cfg, tmp_path / "whole", echo=lambda *_: None)
    original = tj.JudgeHeadModule.on_validation_epoch_end

    def killed_at_epoch_4(self):
        if self.current_epoch == 4:
            raise RuntimeError("killed")
        original(self)

    old = _judge(tmp_path / "cut", hidden=16)  # an older judge there, with its logs, replaced with --force
    (old / "logs").mkdir()
    (old / "logs" / "metrics.csv").write_text("old")
    before = {str(p.relative_to(old)): p.read_bytes() for p in old.rglob("*") if p.is_file()}
    monkeypatch.setattr(tj.JudgeHeadModule, "on_validation_epoch_end", killed_at_epoch_4)
    with pytest.raises(RuntimeError, match="killed"):
        train_one(data, cfg, tmp_path / "cut", echo=lambda *_: None, force=True)
    monkeypatch.setattr(tj.JudgeHeadModule, "on_validation_epoch_end", original)
    assert (work_dir(tmp_path / "cut") / "checkpoints" / "last.ckpt").is_file()
    assert {str(p.relative_to(old)): p.read_bytes() for p in old.rglob("*") if p.is_file()} == before
    with pytest.raises(JudgekitError, match="pass --resume to continue it or --force"):
        train_one(data, cfg, tmp_path / "cut", echo=lambda *_: None)
    other = TrainConfig(**{**cfg.__dict__, "lr": 0.5})
    with pytest.raises(JudgekitError, match="other settings or data"):
        train_one(data, other, tmp_path / "cut", echo=lambda *_: None, resume=True)
    resumed = train_one(data, cfg, tmp_path / "cut", echo=lambda *_: None, resume=True)  # --force carries over
    assert resumed.config["training"]["resumed"] is True and load_judge(old).feature_size == 16
    for k, v in _weights(tmp_path / "whole").items():
        assert torch.equal(v, _weights(tmp_path / "cut")[k]), k  # step for step the uninterrupted run
    assert resumed.config["training"]["history"] == whole.config["training"]["history"]
    assert resumed.config["training"]["best_epoch"] == whole.config["training"]["best_epoch"]
    assert not work_dir(tmp_path / "cut").exists()
    again = train_one(data, cfg, tmp_path / "cut", echo=lambda *_: None, resume=True)  # already complete
    assert again.config["weights_sha256"] == load_judge(tmp_path / "cut").config["weights_sha256"]


def test_a_run_killed_while_writing_run_json_resumes_but_one_with_a_checkpoint_is_refused(tmp_path):
    from judgekit.judge.train import prepare_work

    out = tmp_path / "j"
    work = work_dir(out)
    work.mkdir()
    (work / "run.json").write_text("")  # killed between creating the file and writing it
    with pytest.raises(JudgekitError, match="pass --resume"):
        prepare_work(out, "k", resume=False, force=False)
    assert prepare_work(out, "k", resume=True, force=False) == (work, False)  # nothing to lose: starts over
    assert json.loads((work / "run.json").read_text())["key"] == "k"
    (work / "run.json").write_text("")
    (work / "checkpoints").mkdir()
    (work / "checkpoints" / "last.ckpt").write_bytes(b"x")
    with pytest.raises(JudgekitError, match="other settings or data"):  # a checkpoint of unknown settings
        prepare_work(out, "k", resume=True, force=False)


def _train_cmd(d: Path, out: Path) -> list[str]:
    # Enough epochs that the run is still going well after its first checkpoints on a fast machine (an epoch
    # of this data takes a few ms; at 60 epochs a run could finish within a second of its first checkpoint).
    return ["train", "--data", str(d), "--out", str(out), "--max-epochs", "400", "--patience", "400",
            "--batch-size", "16", *TRAIN]


@pytest.mark.slow
@pytest.mark.parametrize("point", ["before the first checkpoint", "after some checkpoints"])
def test_kill_9_during_train_then_rerun_refuses_or_resumes(mined, tmp_path, point):
    out = tmp_path / "j"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "judgekit", *_train_cmd(mined[0], out)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    work = work_dir(out)
    marker = work / ("run.json" if point.startswith("before") else "checkpoints/last.ckpt")
    deadline = time.monotonic() + 120
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    if point.startswith("after"):  # some checkpoints: the marker rewritten twice more, then kill at once
        stamps = {marker.stat().st_mtime_ns}
        while len(stamps) < 3 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
            try:
                stamps.add(marker.stat().st_mtime_ns)
            except FileNotFoundError:  # replaced between two stats
                pass
    assert proc.poll() is None, "the training run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert not out.exists() and work.is_dir()  # no half-written judge, only the run's work directory
    assert main(_train_cmd(mined[0], out)) == 2  # refuses clearly
    assert main([*_train_cmd(mined[0], out), "--resume"]) == 0
    ref = tmp_path / "ref"
    assert main(_train_cmd(mined[0], ref)) == 0
    for k, v in _weights(ref).items():
        assert torch.allclose(v, _weights(out)[k], atol=1e-6), k
    assert sorted(p.name for p in tmp_path.iterdir()) == ["j", "ref"]


def test_quiet_train_prints_no_lightning_tips_or_warnings(mined, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "judgekit", "train", "--data", str(mined[0]), "--out",
                           str(tmp_path / "j"), "--max-epochs", "2", *TRAIN], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    for noise in ("Tip", "GPU available", "Warning", "warn", "LOCAL_RANK", "litlogger", "Trainer"):
        assert noise not in proc.stdout, noise
    assert proc.stdout.strip().endswith(f"judge -> {tmp_path / 'j'}")


def test_tensorboard_logger_writes_event_files(mined, tmp_path):
    pytest.importorskip("tensorboardX")
    out = tmp_path / "j"
    assert main(["train", "--data", str(mined[0]), "--out", str(out), "--max-epochs", "2", "--logger",
                 "tensorboard", *TRAIN]) == 0
    assert list((out / "logs").rglob("events.out.tfevents.*"))
    assert main(["train", "--data", str(mined[0]), "--out", str(tmp_path / "csv"), "--max-epochs", "2",
                 *TRAIN]) == 0
    rows = (tmp_path / "csv" / "logs" / "metrics.csv").read_text().splitlines()
    assert rows[0].count("val_auroc") == 1 and len(rows) > 2


def test_wandb_logger_without_wandb_is_one_clear_error(mined, tmp_path, capsys, monkeypatch):
    import importlib.util

    if importlib.util.find_spec("wandb") is not None:
        pytest.skip("wandb is installed here")
    assert main(["train", "--data", str(mined[0]), "--out", str(tmp_path / "j"), "--max-epochs", "1", "--logger",
                 "wandb", *TRAIN]) == 2
    assert "--logger wandb needs wandb" in capsys.readouterr().err
