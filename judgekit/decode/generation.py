"""What a decoder returns (a Generation with its GenerationStats) and where a sequence ends (EOS, stop strings)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable

from judgekit.models import ModelPair


@dataclass
class GenerationStats:
    target_calls: int = 0
    draft_calls: int = 0
    new_tokens: int = 0
    wall_time: float = 0.0
    accept_hist: list[int] = field(default_factory=list)  # accept_hist[n] = steps that accepted n drafts

    @property
    def block_efficiency(self) -> float:
        return self.new_tokens / self.target_calls if self.target_calls else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.wall_time if self.wall_time > 0 else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "block_efficiency": self.block_efficiency, "tokens_per_s": self.tokens_per_s}

    @staticmethod
    def merge(stats: list["GenerationStats"]) -> "GenerationStats":
        width = max((len(s.accept_hist) for s in stats), default=0)
        hist = [sum(s.accept_hist[i] for s in stats if i < len(s.accept_hist)) for i in range(width)]
        return GenerationStats(
            sum(s.target_calls for s in stats), sum(s.draft_calls for s in stats),
            sum(s.new_tokens for s in stats), sum(s.wall_time for s in stats), hist,
        )


@dataclass
class Generation:
    prompt: str
    text: str
    token_ids: list[int]  # the completion only
    stats: GenerationStats
    finish_reason: str  # "eos", "stop", "length"

    def to_dict(self) -> dict:
        return {"prompt": self.prompt, "text": self.text, "token_ids": self.token_ids,
                "finish_reason": self.finish_reason, "stats": self.stats.to_dict()}


def text_decoder(tokenizer, skip_special_tokens: bool = True) -> Callable[[list[int]], str]:
    """``ids -> tokenizer.decode(ids, skip_special_tokens=...)``, the same text, faster where it can be.

    Why not always ``tokenizer.decode``: the miner checks after every rollout step whether the outcome is fixed,
    decoding the whole completion each time, and the stop-string scan decodes a tail window per emitted token;
    transformers' wrapper first walks the id list element by element (``to_py_obj``) — more than half of the
    decode's cost (cProfile of ``bench mine``). A fast tokenizer that applies no clean-up is decoded by its Rust
    backend directly, exactly as ``_decode`` does."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and not getattr(tokenizer, "clean_up_tokenization_spaces", True):
        return lambda ids: backend.decode(ids, skip_special_tokens=skip_special_tokens)
    return lambda ids: tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)


class StopScanner:
    """Finds the first emitted token at which a stop string appears, decoding only a short tail window."""

    def __init__(self, tokenizer, stop_strings: tuple[str, ...]):
        self.decode = text_decoder(tokenizer, skip_special_tokens=False)  # special tokens' text can stop, too
        self.stops = tuple(s for s in stop_strings if s)
        self.window = max((len(s) for s in self.stops), default=0) + 8

    def first_hit(self, ids: list[int], start: int) -> int | None:
        """Index j >= start such that the text of ids[:j+1] contains a stop string (None if no such j)."""
        if not self.stops:
            return None
        for j in range(start, len(ids)):
            tail = self.decode(ids[max(0, j + 1 - self.window): j + 1])
            if any(s in tail for s in self.stops):
                return j
        return None


def eos_ids(pair: ModelPair) -> set[int]:
    ids: set[int] = set()
    gen_eos = getattr(pair.target.generation_config, "eos_token_id", None)
    for value in (gen_eos, pair.tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.add(value)
        elif value:
            ids.update(int(v) for v in value)
    return ids
