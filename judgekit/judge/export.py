"""`judgekit export`: a trained judge as one portable file (TorchScript or ONNX), scaler included.

The exported graph is the judge's own :class:`judgekit.judge.head.HeadNet` (standardisation, head, sigmoid)
behind the same inputs the decoder passes: ``hidden`` [n, H] and, for a target+draft judge,
``draft_hidden`` [n, H_d]; the output is P(important) [n]. The judge config (layer, features, model
identity, thresholds, metrics) travels inside the file: as ``judge_config.json`` in TorchScript's extra
files, and as ONNX metadata properties (``judge_config`` plus one ``threshold.<name>`` entry each).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from torch import Tensor, nn

from judgekit.errors import JudgekitError
from judgekit.judge.head import CONFIG_NAME, HeadNet, TrainedJudge, load_judge

FORMATS = ("onnx", "torchscript")


class TargetOnly(nn.Module):
    def __init__(self, net: HeadNet):
        super().__init__()
        self.net = net

    def forward(self, hidden: Tensor) -> Tensor:
        return self.net(hidden)


class TargetAndDraft(nn.Module):
    def __init__(self, net: HeadNet):
        super().__init__()
        self.net = net

    def forward(self, hidden: Tensor, draft_hidden: Tensor) -> Tensor:
        return self.net(torch.cat([hidden, draft_hidden], -1))


def exportable(judge: TrainedJudge) -> tuple[nn.Module, tuple[Tensor, ...], list[str]]:
    """The module to export, example inputs and input names."""
    net = judge.module()
    if judge.uses_draft:
        ex = (torch.randn(2, judge.hidden_size), torch.randn(2, judge.draft_hidden_size or 0))
        return TargetAndDraft(net).eval(), ex, ["hidden", "draft_hidden"]
    return TargetOnly(net).eval(), (torch.randn(2, judge.hidden_size),), ["hidden"]


def export_judge(judge_dir: str | Path, fmt: str, out: str | Path) -> Path:
    """Export to `out` (a file path): written beside it under a temporary name, then renamed into place."""
    if fmt not in FORMATS:
        raise JudgekitError(f"unknown export format {fmt!r}; choose {' or '.join(FORMATS)}")
    judge = load_judge(judge_dir)
    out = Path(out)
    if out.is_dir():
        raise JudgekitError(f"--out {out} is a directory; give the file to write (e.g. {out / ('judge.' + ('onnx' if fmt == 'onnx' else 'pt'))})")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise JudgekitError(f"cannot create the directory of --out {out}: {err.strerror or err}") from None
    if not os.access(out.parent, os.W_OK):
        raise JudgekitError(f"cannot write --out {out}: {out.parent} is not writable")
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        _export_to(judge, fmt, tmp)
        os.replace(tmp, out)
    except (OSError, RuntimeError) as err:  # torch reports IO failures as RuntimeError (inline_container.cc)
        raise JudgekitError(f"cannot write --out {out}: {str(err).strip().splitlines()[0]}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return out


def _export_to(judge: TrainedJudge, fmt: str, out: Path) -> None:
    module, example, names = exportable(judge)
    config_json = json.dumps(judge.config)
    if fmt == "torchscript":
        scripted = torch.jit.trace(module, example)
        torch.jit.save(scripted, str(out), _extra_files={CONFIG_NAME: config_json})
        return
    try:
        import onnx
    except ImportError:
        raise JudgekitError("ONNX export needs the export extra: pip install 'judgekit[export]'") from None
    dynamic = {n: {0: "n"} for n in names} | {"p_important": {0: "n"}}
    torch.onnx.export(module, example, str(out), input_names=names, output_names=["p_important"],
                      dynamic_axes=dynamic, dynamo=False, opset_version=17)
    model = onnx.load(str(out))
    meta = {"judge_config": config_json, "judgekit.features": judge.features, "judgekit.layer": str(judge.layer)}
    meta |= {f"threshold.{k}": repr(float(v)) for k, v in judge.config.get("thresholds", {}).items()}
    for key, value in meta.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(model, str(out))


def load_torchscript(path: str | Path) -> tuple[torch.jit.ScriptModule, dict]:
    """An exported TorchScript judge and its config."""
    extra = {CONFIG_NAME: ""}
    module = torch.jit.load(str(path), _extra_files=extra)
    return module, json.loads(extra[CONFIG_NAME])
