"""A saved judge head: safetensors weights + JSON config, applied to target hidden states.

The config records which model's hidden states the head was trained on (name and hidden size), so that
using it with another target fails with a clear error instead of silently producing noise.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from judgekit.errors import JudgekitError

CONFIG_NAME = "judge_config.json"
WEIGHTS_NAME = "judge.safetensors"


@dataclass
class LinearJudge:
    """Logistic head on standardised features: P(important) = sigmoid(w . (h - mean) / std + b)."""

    weight: Tensor  # [H]
    bias: Tensor  # []
    mean: Tensor  # [H]
    std: Tensor  # [H]
    config: dict

    @property
    def hidden_size(self) -> int:
        return int(self.weight.shape[0])

    def to(self, device: torch.device) -> "LinearJudge":
        return LinearJudge(*(t.to(device) for t in (self.weight, self.bias, self.mean, self.std)), self.config)

    def __call__(self, hidden: Tensor, tokens: Tensor) -> Tensor:
        z = (hidden.float() - self.mean) / self.std
        return torch.sigmoid(z @ self.weight + self.bias)

    def save(self, path: str | Path) -> None:
        from safetensors.torch import save_file

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        tensors = {"weight": self.weight, "bias": self.bias.reshape(1), "mean": self.mean, "std": self.std}
        save_file({k: v.contiguous().float().cpu() for k, v in tensors.items()}, str(path / WEIGHTS_NAME))
        (path / CONFIG_NAME).write_text(json.dumps({**self.config, "hidden_size": self.hidden_size}, indent=2))


def load_judge(path: str | Path) -> LinearJudge:
    from safetensors.torch import load_file

    path = Path(path)
    if not (path / CONFIG_NAME).exists() or not (path / WEIGHTS_NAME).exists():
        raise JudgekitError(f"{path} is not a judge directory (needs {CONFIG_NAME} and {WEIGHTS_NAME})")
    try:
        config = json.loads((path / CONFIG_NAME).read_text())
        t = load_file(str(path / WEIGHTS_NAME))
        return LinearJudge(t["weight"], t["bias"].reshape(()), t["mean"], t["std"], config)
    except Exception as err:  # noqa: BLE001 - safetensors, JSON and IO report corruption in different types
        raise JudgekitError(f"corrupt judge at {path}: {err}") from None


def check_judge_matches(judge: LinearJudge, target_hidden_size: int, target_name: str) -> None:
    """Refuse a judge trained on another model's hidden states."""
    if judge.hidden_size != target_hidden_size:
        trained_on = judge.config.get("target_model", "another model")
        raise JudgekitError(
            f"the judge was trained on {trained_on} (hidden size {judge.hidden_size}) but the target "
            f"{target_name!r} has hidden size {target_hidden_size}"
        )
