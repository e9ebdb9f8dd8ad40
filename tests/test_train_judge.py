"""Judge training: mix semantics, split by problem, the head against scikit-learn, the artifact, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from judge_fixtures import write_mined

from judgekit.judge import data as jd
from judgekit.cli import main
from judgekit.errors import JudgekitError
from judgekit.judge.head import load_judge
from judgekit.judge.train import TrainConfig, score, train_one

QUIET = dict(progress=False, accelerator="cpu", devices=1)


@pytest.fixture(scope="module")
def two_sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("mined")
    a = write_mined(root / "a", "math", 120, seed=1)
    b = write_mined(root / "b", "code", 80, seed=2, signal=1.5)
    return a, b


def _train_keys(sources, sel):
    return {sources[i].groups[g] for i, rows in enumerate(sel.train_rows) for g in sources[i].group[rows]}


def _val_keys(sources, sel):
    return {sources[i].groups[g] for i, rows in enumerate(sel.val_rows) for g in sources[i].group[rows]}


# ------------------------------------------------------------------------------------------ mix semantics


def test_apportion_and_largest_budget():
    assert jd.apportion(10, (9, 1)) == [9, 1]
    assert jd.apportion(7, (1, 1, 1)) == [3, 2, 2]
    assert sum(jd.apportion(101, (3, 7))) == 101
    assert jd.max_budget((9, 1), [90, 50]) == 100
    assert jd.max_budget((1, 9), [90, 50]) == 55  # 6 + 49 > 50 at 56


@pytest.mark.parametrize("unit", ["problems", "mismatches"])
def test_sweep_keeps_the_total_changes_the_composition_and_never_leaks(two_sources, unit):
    sources, split, _spec = jd.prepare([str(d) for d in two_sources], seed=3)
    avail = jd.available_units(sources, split, unit)
    mixes = jd.parse_sweep("9:1,7:3,5:5,3:7,1:9", 2)
    budget = min(jd.max_budget(m, avail) for _t, m in mixes) // 10 * 10
    val_keys = None
    for text, mix in mixes:
        sel = jd.select(sources, split, text, mix, budget, unit)
        got = [len(np.unique(s.group[r])) if unit == "problems" else len(r) for s, r in zip(sources, sel.train_rows)]
        assert sum(got) == budget  # constant total across the sweep
        assert [g / budget for g in got] == pytest.approx([m / sum(mix) for m in mix])  # realised == requested
        assert [r["share"] for r in sel.realised] == pytest.approx([m / sum(mix) for m in mix])
        assert not _train_keys(sources, sel) & _val_keys(sources, sel)  # no problem on both sides
        val_keys = val_keys or _val_keys(sources, sel)
        assert _val_keys(sources, sel) == val_keys  # one validation set for the whole sweep


def test_split_groups_by_task_and_problem_id_even_when_ids_collide(tmp_path):
    # Two tasks whose problem ids coincide, and the same task in two sources: grouping is by (task, id).
    a = write_mined(tmp_path / "a", "math", 40, seed=1)
    b = write_mined(tmp_path / "b", "math", 40, seed=2)  # same (task, id) keys as a: one problem each
    sources, split, _ = jd.prepare([str(a), str(b)], seed=0)
    sel = jd.select(sources, split, "1:1", (1.0, 1.0), None, "problems")
    assert not _train_keys(sources, sel) & _val_keys(sources, sel)


def test_infeasible_mix_names_the_largest_budget(two_sources):
    sources, split, _ = jd.prepare([str(d) for d in two_sources])
    largest = jd.max_budget((1.0, 9.0), jd.available_units(sources, split, "problems"))
    with pytest.raises(JudgekitError, match=f"largest feasible budget for this mix is {largest}$"):
        jd.select(sources, split, "1:9", (1.0, 9.0), largest + 1, "problems")


@pytest.mark.parametrize("text, msg", [("9:1:1", "3 part"), ("9:0", "must be positive"), ("9:x", "positive numbers")])
def test_bad_mix(text, msg):
    with pytest.raises(JudgekitError, match=msg):
        jd.parse_mix(text, 2)


# -------------------------------------------------------------------------------- the head vs sklearn


def test_linear_head_matches_sklearn_logistic_regression(tmp_path):
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.preprocessing import StandardScaler

    d = write_mined(tmp_path / "m", "math", 800, signal=0.9, seed=5, hidden=24)
    sources, split, spec = jd.prepare([str(d)], layer=1, seed=1)
    data = jd.build_data(sources, jd.select(sources, split, "1", (1.0,), None, "problems"), spec)
    res = train_one(data, TrainConfig(max_epochs=30, batch_size=128, **QUIET), None, echo=lambda *_: None)
    scaler = StandardScaler().fit(data.x_train.astype(np.float64))
    lr = LogisticRegression(class_weight="balanced", max_iter=2000)
    lr.fit(scaler.transform(data.x_train.astype(np.float64)), data.y_train)
    sk = roc_auc_score(data.y_val, lr.decision_function(scaler.transform(data.x_val.astype(np.float64))))
    ours = res.metrics["auroc"]
    assert 0.6 < sk < 0.97  # a real but imperfect signal, so the comparison means something
    assert abs(ours - sk) < 0.01, (ours, sk)


# ------------------------------------------------------------------------------------------- artifact


@pytest.fixture(scope="module")
def trained(two_sources, tmp_path_factory):
    out = tmp_path_factory.mktemp("judge") / "j"
    rc = main(["train", "--data", str(two_sources[0]), str(two_sources[1]), "--out", str(out), "--mix", "9:1",
               "--budget", "80",
               "--layer", "1", "--features", "target+draft", "--accelerator", "cpu", "--devices", "1",
               "--max-epochs", "8", "--quiet"])
    assert rc == 0
    return out


def test_artifact_config_and_scores(trained, two_sources):
    judge = load_judge(trained)
    c = judge.config
    assert c["schema_version"] == 3 and c["layer"] == 1 and c["features"] == "target+draft"
    assert (c["hidden_size"], c["draft_hidden_size"]) == (16, 8)
    assert (c["target_model"], c["draft_model"]) == ("tiny-target", "tiny-draft")
    assert set(c["thresholds"]) == {f"p{q}" for q in range(10, 100, 10)} | {"recall90", "recall95"}
    assert c["mix"]["requested"] == "9:1" and c["mix"]["realised"] == pytest.approx({"math": 0.9, "code": 0.1})
    metrics = json.loads((trained / "metrics.json").read_text())
    assert set(metrics["per_source"]) == {"math", "code"}
    # pXX accepts ~XX % of validation mismatches; recall90 keeps >= 90 % of important ones out.
    assert metrics["percentiles"]["p80"]["accepted"] == pytest.approx(0.8, abs=0.03)
    assert metrics["recall_targets"]["recall90"]["recall_important"] >= 0.9
    # The loaded judge (hidden, tokens, draft_hidden) gives the scores its metrics were computed from.
    sources, split, spec = jd.prepare([str(d) for d in two_sources], layer=1, features="target+draft")
    data = jd.build_data(sources, jd.select(sources, split, "9:1", (9.0, 1.0), 80, "problems"), spec)
    x = torch.from_numpy(data.x_val.astype(np.float32))
    p = judge(x[:, :16], torch.zeros(len(x), dtype=torch.long), x[:, 16:]).numpy()
    from sklearn.metrics import roc_auc_score

    assert roc_auc_score(data.y_val, p) == pytest.approx(c["metrics"]["auroc"], abs=1e-9)
    assert score(judge.module(), data.x_val) == pytest.approx(p, abs=1e-6)
    with pytest.raises(JudgekitError, match="no draft hidden state"):
        judge(x[:, :16], None)


def test_judge_show(trained, capsys):
    assert main(["judge", "show", str(trained)]) == 0
    out = capsys.readouterr().out
    assert "hidden_states[1] [16] + draft hidden [8]" in out and "recall90" in out and "AUROC" in out


def test_mlp_head_trains_and_round_trips(two_sources, tmp_path):
    sources, split, spec = jd.prepare([str(two_sources[0])], layer=1)
    data = jd.build_data(sources, jd.select(sources, split, "1", (1.0,), None, "problems"), spec)
    res = train_one(data, TrainConfig(head="mlp", mlp_hidden=8, max_epochs=3, **QUIET), tmp_path / "mlp",
                    echo=lambda *_: None)
    judge = load_judge(tmp_path / "mlp")
    x = torch.from_numpy(data.x_val.astype(np.float32))
    assert judge(x, None).numpy() == pytest.approx(score(res.net, data.x_val), abs=1e-6)


# ------------------------------------------------------------------------------------------- bad input


def _cli_error(capsys, *argv) -> str:
    assert main(list(argv)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("judgekit: error: ") and "\n" not in err
    return err


def test_bad_inputs_are_one_line_errors(tmp_path, two_sources, capsys):
    a, b = map(str, two_sources)
    out = str(tmp_path / "j")
    assert "3 part" in _cli_error(capsys, "train", "--data", a, b, "--out", out, "--mix", "1:1:1")
    assert "must be positive" in _cli_error(capsys, "train", "--data", a, b, "--out", out, "--mix", "1:0")
    assert "largest feasible budget" in _cli_error(capsys, "train", "--data", a, b, "--out", out, "--mix", "1:9",
                                                   "--budget", "100000")
    empty = write_mined(tmp_path / "empty", "math", 0)
    assert "no mined rows" in _cli_error(capsys, "train", "--data", str(empty), "--out", out)
    one = write_mined(tmp_path / "one", "math", 20, labels="none")
    assert "both classes" in _cli_error(capsys, "train", "--data", str(one), "--out", out)
    other = write_mined(tmp_path / "other", "code", 20, target="another-target")
    assert "different targets" in _cli_error(capsys, "train", "--data", a, str(other), "--out", out)
    layers = write_mined(tmp_path / "layers", "code", 20, layers=(-1, 2))
    assert "different layers" in _cli_error(capsys, "train", "--data", a, str(layers), "--out", out, "--layer", "1")
    nodraft = write_mined(tmp_path / "nodraft", "code", 20, draft_hidden=None)
    assert "--draft-features" in _cli_error(capsys, "train", "--data", str(nodraft), "--out", out, "--features",
                                            "target+draft")
    corrupt = write_mined(tmp_path / "corrupt", "math", 20)
    shard = sorted(corrupt.glob("mismatches-*.parquet"))[0]
    shard.write_bytes(b"not parquet")
    assert shard.name in _cli_error(capsys, "train", "--data", str(corrupt), "--out", out)


def test_single_class_in_the_validation_split_is_refused(tmp_path):
    d = write_mined(tmp_path / "m", "math", 3, per_problem=(1, 1), important_rate=0.5, seed=4)
    with pytest.raises(JudgekitError, match="single class|both classes"):
        sources, split, spec = jd.prepare([str(d)], val_fraction=0.3)
        jd.build_data(sources, jd.select(sources, split, "1", (1.0,), None, "problems"), spec)


# ------------------------------------------------------------------------------------------------ DDP


@pytest.mark.slow
def test_two_process_ddp_gives_the_same_head(tmp_path):
    """2 gloo processes on CPU, each with half of every global batch, train the same head as 1 process."""
    d = write_mined(tmp_path / "m", "math", 60, seed=7)
    out = tmp_path / "ddp"
    proc = subprocess.run([sys.executable, "-m", "judgekit", "train", "--data", str(d), "--out", str(out),
                           "--layer", "1", "--accelerator", "cpu", "--devices", "2", "--strategy", "ddp",
                           "--max-epochs", "3", "--batch-size", "32", "--quiet"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    ddp = load_judge(out)
    assert ddp.config["training"]["world_size"] == 2
    # The same command's defaults (seed 0, lr, weight decay, patience), in this process on one device.
    sources, split, spec = jd.prepare([str(d)], layer=1)
    data = jd.build_data(sources, jd.select(sources, split, "natural", tuple(map(float, jd.available_units(
        sources, split, "problems"))), None, "problems"), spec)
    one = train_one(data, TrainConfig(max_epochs=3, batch_size=32, **QUIET), None, echo=lambda *_: None)
    assert one.config["training"]["world_size"] == 1
    single = one.net.body
    torch.testing.assert_close(ddp.weight, single.weight.detach().reshape(-1), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(ddp.bias, single.bias.detach().reshape(()), atol=1e-5, rtol=1e-4)
    assert ddp.config["training"]["best_epoch"] == one.config["training"]["best_epoch"]


def test_mix_sweep_writes_one_judge_per_mix_and_a_summary(two_sources, tmp_path, capsys):
    out = tmp_path / "sweep"
    assert main(["train", "--data", str(two_sources[0]), str(two_sources[1]), "--out", str(out),
                 "--mix-sweep", "9:1,5:5,1:9", "--layer", "1", "--accelerator", "cpu", "--devices", "1",
                 "--max-epochs", "2", "--quiet"]) == 0
    rows = json.loads((out / "sweep.json").read_text())
    assert [r["mix"] for r in rows] == ["9:1", "5:5", "1:9"]
    assert len({r["budget"] for r in rows}) == 1  # one budget for the whole sweep
    for r in rows:
        judge = load_judge(out / r["dir"])
        assert judge.config["mix"]["requested"] == r["mix"]
        assert judge.config["mix"]["budget"] == r["budget"]
    assert "AUROC" in (out / "sweep.md").read_text() and "sweep ->" in capsys.readouterr().out


def test_old_format_judge_loads_as_last_layer_target_only(tmp_path, capsys):
    from judgekit.judge.head import LinearJudge

    LinearJudge(torch.ones(4), torch.tensor(0.0), torch.zeros(4), torch.ones(4), {"target_model": "x"}).save(tmp_path)
    config = json.loads((tmp_path / "judge_config.json").read_text())
    assert "schema_version" not in config and "features" not in config
    judge = load_judge(tmp_path)
    assert (judge.layer, judge.features, judge.hidden_size, judge.uses_draft) == (-1, "target", 4, False)
    assert main(["judge", "show", str(tmp_path)]) == 0
    assert "hidden_states[-1] [4]" in capsys.readouterr().out


def test_feature_cache_memory_maps_the_same_matrices(two_sources, tmp_path):
    sources, split, spec = jd.prepare([str(d) for d in two_sources], layer=1, features="target+draft")
    sel = jd.select(sources, split, "1:1", (1.0, 1.0), 40, "problems")
    ram, mapped = jd.build_data(sources, sel, spec), jd.build_data(sources, sel, spec, tmp_path / "cache")
    assert isinstance(mapped.x_train, np.memmap) and (tmp_path / "cache" / "train-r0.npy").is_file()
    np.testing.assert_array_equal(np.asarray(mapped.x_train), ram.x_train)
    np.testing.assert_array_equal(np.asarray(mapped.x_val), ram.x_val)
    assert ram.x_train.dtype == np.float16 and ram.x_train.shape[1] == 24
