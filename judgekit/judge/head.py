"""A saved judge head: safetensors weights + JSON config, applied to the verify forward's hidden states.

A judge directory holds ``judge.safetensors`` (the head and its standardisation statistics) and
``judge_config.json``, which records everything needed to use the head correctly (docs/design.md §4):

* the feature spec: ``layer`` (the index into transformers' ``hidden_states`` exactly as
  ``judgekit mine --layers`` names it), ``features`` (``"target"`` or ``"target+draft"``), ``hidden_size``
  and ``draft_hidden_size``; the decoder reads the layer and features from here, not from its caller;
* the target and draft identity, so a head is refused on a model whose hidden size differs;
* ``thresholds`` on P(important) (``p10`` … ``p90``: percentiles of the validation scores; ``recall90`` /
  ``recall95``: the largest threshold keeping that recall of important mismatches), the metrics, the
  realised training mix and a data summary.

Judges written before these keys existed (no ``schema_version``) still load: layer -1, target features.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from judgekit.errors import JudgekitError

CONFIG_NAME = "judge_config.json"
WEIGHTS_NAME = "judge.safetensors"
JUDGE_SCHEMA_VERSION = 2
FEATURES = ("target", "target+draft")


class HeadNet(nn.Module):
    """The head as a torch module: standardisation included, features [n, F] -> P(important) [n].

    Training (Lightning) and export (TorchScript / ONNX) both use this module, so the exported graph is the
    trained function itself, scaler included.
    """

    def __init__(self, in_features: int, head: str = "linear", mlp_hidden: int = 256):
        super().__init__()
        if head not in ("linear", "mlp"):
            raise JudgekitError(f"unknown head {head!r}; choose linear or mlp")
        self.head = head
        self.register_buffer("mean", torch.zeros(in_features))
        self.register_buffer("std", torch.ones(in_features))
        if head == "linear":
            self.body = nn.Linear(in_features, 1)
        else:
            self.body = nn.Sequential(nn.Linear(in_features, mlp_hidden), nn.ReLU(), nn.Linear(mlp_hidden, 1))

    def logits(self, x: Tensor) -> Tensor:
        return self.body((x.float() - self.mean) / self.std).squeeze(-1)

    def forward(self, x: Tensor) -> Tensor:
        return torch.sigmoid(self.logits(x))


class _JudgeBase:
    """Shared behaviour of the saved heads: feature assembly, device moves, config accessors."""

    config: dict
    mean: Tensor

    @property
    def features(self) -> str:
        return str(self.config.get("features", "target"))

    @property
    def uses_draft(self) -> bool:
        return self.features == "target+draft"

    @property
    def layer(self) -> int:
        return int(self.config.get("layer", -1))

    @property
    def feature_size(self) -> int:
        return int(self.mean.shape[0])

    @property
    def draft_hidden_size(self) -> int | None:
        return int(self.config["draft_hidden_size"]) if self.uses_draft else None

    @property
    def hidden_size(self) -> int:
        """The target hidden size the head reads (the feature size minus the draft part, if any)."""
        return self.feature_size - (self.draft_hidden_size or 0)

    def assemble(self, hidden: Tensor, draft_hidden: Tensor | None = None) -> Tensor:
        """The feature matrix the head was trained on: target hidden, then the draft's if configured."""
        if not self.uses_draft:
            return hidden.float()
        if draft_hidden is None:
            raise JudgekitError("this judge reads target+draft features but no draft hidden state was given")
        return torch.cat([hidden.float(), draft_hidden.float()], -1)

    def to(self, device):
        moved = {f.name: getattr(self, f.name).to(device) for f in dataclasses.fields(self)  # type: ignore[arg-type]
                 if isinstance(getattr(self, f.name), Tensor)}
        return dataclasses.replace(self, **moved)  # type: ignore[type-var]

    def __call__(self, hidden: Tensor, tokens: Tensor | None = None, draft_hidden: Tensor | None = None) -> Tensor:
        z = (self.assemble(hidden, draft_hidden) - self.mean) / self.std  # type: ignore[attr-defined]
        return torch.sigmoid(self._logits(z))

    def _logits(self, z: Tensor) -> Tensor:
        raise NotImplementedError

    def _tensors(self) -> dict[str, Tensor]:
        raise NotImplementedError

    def module(self) -> HeadNet:
        """This head as a :class:`HeadNet` (for export); gives the same scores as calling the judge."""
        raise NotImplementedError

    def save(self, path: str | Path) -> None:
        from safetensors.torch import save_file

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous().float().cpu() for k, v in self._tensors().items()}, str(path / WEIGHTS_NAME))
        config = {**self.config, "hidden_size": self.hidden_size}
        (path / CONFIG_NAME).write_text(json.dumps(config, indent=2) + "\n")


@dataclass
class LinearJudge(_JudgeBase):
    """Logistic head on standardised features: P(important) = sigmoid(w . (x - mean) / std + b)."""

    weight: Tensor  # [F]
    bias: Tensor  # []
    mean: Tensor  # [F]
    std: Tensor  # [F]
    config: dict

    def _logits(self, z: Tensor) -> Tensor:
        return z @ self.weight + self.bias

    def _tensors(self) -> dict[str, Tensor]:
        return {"weight": self.weight, "bias": self.bias.reshape(1), "mean": self.mean, "std": self.std}

    def module(self) -> HeadNet:
        net = HeadNet(self.feature_size, "linear")
        with torch.no_grad():
            net.mean.copy_(self.mean)
            net.std.copy_(self.std)
            net.body.weight.copy_(self.weight.reshape(1, -1))
            net.body.bias.copy_(self.bias.reshape(1))
        return net.eval()


@dataclass
class MLPJudge(_JudgeBase):
    """One-hidden-layer ReLU head on standardised features."""

    w1: Tensor  # [D, F]
    b1: Tensor  # [D]
    w2: Tensor  # [D]
    b2: Tensor  # []
    mean: Tensor  # [F]
    std: Tensor  # [F]
    config: dict

    def _logits(self, z: Tensor) -> Tensor:
        return torch.relu(z @ self.w1.T + self.b1) @ self.w2 + self.b2

    def _tensors(self) -> dict[str, Tensor]:
        return {"w1": self.w1, "b1": self.b1, "w2": self.w2, "b2": self.b2.reshape(1), "mean": self.mean,
                "std": self.std}

    def module(self) -> HeadNet:
        net = HeadNet(self.feature_size, "mlp", int(self.w1.shape[0]))
        with torch.no_grad():
            net.mean.copy_(self.mean)
            net.std.copy_(self.std)
            net.body[0].weight.copy_(self.w1)
            net.body[0].bias.copy_(self.b1)
            net.body[2].weight.copy_(self.w2.reshape(1, -1))
            net.body[2].bias.copy_(self.b2.reshape(1))
        return net.eval()


TrainedJudge = LinearJudge | MLPJudge


def judge_from_module(net: HeadNet, config: dict) -> TrainedJudge:
    """The saved-judge form of a trained :class:`HeadNet`."""
    sd = {k: v.detach().float().cpu().clone() for k, v in net.state_dict().items()}
    if net.head == "linear":
        return LinearJudge(sd["body.weight"].reshape(-1), sd["body.bias"].reshape(()), sd["mean"], sd["std"],
                           config)
    return MLPJudge(sd["body.0.weight"], sd["body.0.bias"], sd["body.2.weight"].reshape(-1),
                    sd["body.2.bias"].reshape(()), sd["mean"], sd["std"], config)


def normalise_config(config: dict, feature_size: int) -> dict:
    """Fill the keys old-format judges lack (layer -1, target features) and check the feature spec."""
    config = dict(config)
    config.setdefault("layer", -1)
    config.setdefault("features", "target")
    config.setdefault("draft_hidden_size", None)
    if config["features"] not in FEATURES:
        raise JudgekitError(f"unknown judge features {config['features']!r}; expected one of {', '.join(FEATURES)}")
    if config["features"] == "target+draft":
        if not config.get("draft_hidden_size") or not config.get("hidden_size"):
            raise JudgekitError("a target+draft judge needs hidden_size and draft_hidden_size in its config")
        if config["hidden_size"] + config["draft_hidden_size"] != feature_size:
            raise JudgekitError(f"judge weights have {feature_size} features, config says "
                                f"{config['hidden_size']} + {config['draft_hidden_size']}")
    config.setdefault("hidden_size", feature_size)
    if int(config["hidden_size"]) != feature_size - (config["draft_hidden_size"] or 0):
        raise JudgekitError(f"judge weights have {feature_size} features, config says hidden size "
                            f"{config['hidden_size']}")
    return config


def load_judge(path: str | Path) -> TrainedJudge:
    from safetensors.torch import load_file

    path = Path(path)
    if not (path / CONFIG_NAME).exists() or not (path / WEIGHTS_NAME).exists():
        raise JudgekitError(f"{path} is not a judge directory (needs {CONFIG_NAME} and {WEIGHTS_NAME})")
    try:
        config = json.loads((path / CONFIG_NAME).read_text())
        t = load_file(str(path / WEIGHTS_NAME))
        if "w1" in t:
            judge: TrainedJudge = MLPJudge(t["w1"], t["b1"], t["w2"], t["b2"].reshape(()), t["mean"], t["std"],
                                           config)
        else:
            judge = LinearJudge(t["weight"], t["bias"].reshape(()), t["mean"], t["std"], config)
    except Exception as err:  # noqa: BLE001 - safetensors, JSON and IO report corruption in different types
        raise JudgekitError(f"corrupt judge at {path}: {err}") from None
    judge.config = normalise_config(config, judge.feature_size)
    return judge


def check_judge_matches(judge: TrainedJudge, target_hidden_size: int, target_name: str, *,
                        draft_hidden_size: int | None = None, num_hidden_layers: int | None = None) -> None:
    """Refuse a judge trained on another model's hidden states (or a layer the target does not have)."""
    if judge.hidden_size != target_hidden_size:
        trained_on = judge.config.get("target_model", "another model")
        raise JudgekitError(
            f"the judge was trained on {trained_on} (hidden size {judge.hidden_size}) but the target "
            f"{target_name!r} has hidden size {target_hidden_size}"
        )
    if judge.uses_draft and draft_hidden_size is not None and judge.draft_hidden_size != draft_hidden_size:
        raise JudgekitError(
            f"the judge reads draft features of {judge.config.get('draft_model', 'another draft')} (hidden size "
            f"{judge.draft_hidden_size}) but the draft has hidden size {draft_hidden_size}"
        )
    if num_hidden_layers is not None and not -(num_hidden_layers + 1) <= judge.layer <= num_hidden_layers:
        raise JudgekitError(f"the judge reads hidden-state layer {judge.layer} but the target has only "
                            f"{num_hidden_layers + 1} hidden states")


def bind_rule(rule, pair):
    """A rule whose judge (if it has one) is checked against the pair (hidden sizes, layer) and moved to
    the pair's device; any other rule is returned as is. Used by `judgekit generate` and evaluation."""
    judge = getattr(rule, "judge", None)
    if judge is None or not hasattr(judge, "config"):
        return rule
    check_judge_matches(judge, pair.target.config.hidden_size, pair.target_name,
                        draft_hidden_size=pair.draft.config.hidden_size,
                        num_hidden_layers=pair.target.config.num_hidden_layers)
    return dataclasses.replace(rule, judge=judge.to(pair.device))
