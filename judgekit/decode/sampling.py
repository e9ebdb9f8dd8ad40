"""The sampling transform (temperature, top-k, top-p) both models' logits go through before a rule sees them."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from judgekit.errors import JudgekitError


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 0.0  # 0 = greedy
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise JudgekitError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise JudgekitError(f"top_k must be >= 1, got {self.top_k}")
        if self.top_p is not None and not 0.0 < self.top_p <= 1.0:
            raise JudgekitError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def to_probs(logits: Tensor, cfg: SamplingConfig, need_shape: bool) -> tuple[Tensor, Tensor | None]:
    """Rows of sampling probabilities, plus the distribution 'shape' some rules decide on.

    Greedy gives one-hot rows (docs/design.md §2) and, when asked, the temperature-1 softmax as the shape; with
    sampling the shape is the sampling distribution itself (None: the rule reads p and q directly).
    """
    logits = logits.float()
    if cfg.greedy:
        probs = torch.zeros_like(logits).scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
        return probs, (torch.softmax(logits, -1) if need_shape else None)
    logits = logits / cfg.temperature
    if cfg.top_k is not None and cfg.top_k < logits.shape[-1]:
        kth = logits.topk(cfg.top_k, -1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, -torch.inf)
    if cfg.top_p is not None and cfg.top_p < 1.0:
        sorted_logits, order = logits.sort(-1, descending=True)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        drop_sorted = cum - sorted_logits.softmax(-1) >= cfg.top_p  # keep the smallest prefix reaching top_p
        logits = logits.masked_fill(drop_sorted.scatter(-1, order, drop_sorted), -torch.inf)
    return torch.softmax(logits, -1), None
