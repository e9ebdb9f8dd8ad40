"""Exported judges (TorchScript, ONNX) give the PyTorch head's scores and carry its config and thresholds."""

from __future__ import annotations

import json

import pytest
import torch

from judgekit.cli import main
from judgekit.judge.export import load_torchscript
from judgekit.judge.head import HeadNet, judge_from_module, load_judge


def _judge_dir(tmp_path, features="target+draft", head="linear"):
    torch.manual_seed(0)
    hidden, draft = 12, 6
    size = hidden + (draft if features == "target+draft" else 0)
    net = HeadNet(size, head, 5)
    with torch.no_grad():
        net.mean.copy_(torch.randn(size))
        net.std.copy_(torch.rand(size) + 0.5)
        for p in net.parameters():
            p.copy_(torch.randn_like(p))
    config = {"schema_version": 2, "layer": 2, "features": features, "hidden_size": hidden,
              "draft_hidden_size": draft if features == "target+draft" else None, "target_model": "t",
              "draft_model": "d", "thresholds": {"p20": 0.25, "p80": 0.75, "recall90": 0.4}}
    judge_from_module(net, config).save(tmp_path / "j")
    return tmp_path / "j", hidden, draft


def _inputs(judge, n=7):
    g = torch.Generator().manual_seed(1)
    h = torch.randn(n, judge.hidden_size, generator=g) * 3
    d = torch.randn(n, judge.draft_hidden_size, generator=g) if judge.uses_draft else None
    return h, d


@pytest.mark.parametrize("features, head", [("target+draft", "linear"), ("target", "mlp")])
def test_torchscript_export_matches_the_head(tmp_path, features, head):
    jdir, _, _ = _judge_dir(tmp_path, features, head)
    assert main(["export", str(jdir), "--format", "torchscript", "--out", str(tmp_path / "j.pt")]) == 0
    judge = load_judge(jdir)
    module, config = load_torchscript(tmp_path / "j.pt")
    h, d = _inputs(judge)
    want = judge(h, None, d)
    got = module(h, d) if judge.uses_draft else module(h)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert config["thresholds"]["p80"] == 0.75 and config["layer"] == 2


@pytest.mark.parametrize("features, head", [("target+draft", "linear"), ("target", "mlp")])
def test_onnx_export_runs_in_onnxruntime_and_matches(tmp_path, features, head):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    jdir, _, _ = _judge_dir(tmp_path, features, head)
    assert main(["export", str(jdir), "--format", "onnx", "--out", str(tmp_path / "j.onnx")]) == 0
    judge = load_judge(jdir)
    sess = ort.InferenceSession(str(tmp_path / "j.onnx"), providers=["CPUExecutionProvider"])
    h, d = _inputs(judge, n=11)  # another batch size than the export example: the batch axis is dynamic
    feeds = {"hidden": h.numpy()} | ({"draft_hidden": d.numpy()} if judge.uses_draft else {})
    got = torch.from_numpy(sess.run(["p_important"], feeds)[0])
    torch.testing.assert_close(got, judge(h, None, d), atol=1e-5, rtol=1e-5)
    meta = sess.get_modelmeta().custom_metadata_map
    assert json.loads(meta["judge_config"])["features"] == features
    assert float(meta["threshold.recall90"]) == 0.4


def test_unknown_judge_dir_is_a_clean_error(tmp_path, capsys):
    assert main(["export", str(tmp_path), "--format", "torchscript", "--out", str(tmp_path / "x.pt")]) == 2
    assert "not a judge directory" in capsys.readouterr().err
