"""Loading a target/draft pair by hub id, local path or pocket alias, and checking the pair is compatible.

Speculative decoding compares the two models token by token, so the pair must share the token -> id
mapping; the embedding matrices may be padded past the tokenizer (Qwen2.5-0.5B has 151936 rows, -7B
152064) — we then decode over the shared range, which contains every real token.
"""

from __future__ import annotations

import functools
import inspect
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from judgekit.errors import JudgekitError
from judgekit.pocket import ALIASES as POCKET_MODELS
from judgekit.pocket import pocket_model_path

POCKET_ALIASES = {alias: pocket_model_path(alias) for alias in POCKET_MODELS}  # checkout or installed copy
DTYPES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16,
          "fp32": torch.float32, "float32": torch.float32}


@dataclass
class ModelPair:
    target: Any
    draft: Any
    tokenizer: Any
    target_name: str
    draft_name: str
    vocab_size: int  # shared logit range used for decoding
    device: torch.device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.target.parameters()).dtype


def resolve_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError as err:
        raise JudgekitError(f"unknown device {device!r}: {err}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise JudgekitError(f"device {device!r} requested but CUDA is not available")
    return dev


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    if dtype not in DTYPES:
        raise JudgekitError(f"unknown dtype {dtype!r}; use auto, bf16, fp16 or fp32")
    return DTYPES[dtype]


def resolve_model_path(name: str) -> str:
    """Map a pocket alias to its directory; refuse a local-looking path that does not exist."""
    if name in POCKET_ALIASES:
        path = POCKET_ALIASES[name]
        if not (path / "config.json").exists():
            raise JudgekitError(f"pocket model {name!r} is missing at {path} (run `judgekit pocket train`)")
        return str(path)
    expanded = os.path.expanduser(name)
    if os.path.isdir(expanded):
        if not os.path.exists(os.path.join(expanded, "config.json")):
            raise JudgekitError(f"model directory {name!r} has no config.json")
        return expanded
    # A hub id is "name" or "org/name"; anything else that is not an existing directory is a bad path.
    if name.startswith((".", "/", "~")) or name.count("/") > 1 or os.path.exists(expanded):
        raise JudgekitError(f"model path {name!r} does not exist")
    return name  # a hub id such as Qwen/Qwen2.5-0.5B-Instruct


def load_tokenizer(name: str):
    from transformers import AutoTokenizer

    path = resolve_model_path(name)
    try:
        return AutoTokenizer.from_pretrained(path)
    except Exception as err:  # noqa: BLE001 - hub/IO errors come in many types; report them in one line
        raise JudgekitError(f"cannot load tokenizer {name!r}: {_first_line(err)}") from None


def load_model(name: str, device: torch.device, dtype: torch.dtype):
    from transformers import AutoModelForCausalLM

    path = resolve_model_path(name)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    except Exception as err:  # noqa: BLE001
        raise JudgekitError(f"cannot load model {name!r}: {_first_line(err)}") from None
    return model.to(device).eval()


def _first_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def tokenizer_mismatch(tok_a, tok_b) -> str | None:
    """A one-line description of how two tokenizers map text differently, or None if they agree."""
    va, vb = tok_a.get_vocab(), tok_b.get_vocab()
    if va != vb:
        only_a = sorted(set(va) - set(vb), key=va.get)[:3]
        only_b = sorted(set(vb) - set(va), key=vb.get)[:3]
        moved = sorted((t for t in set(va) & set(vb) if va[t] != vb[t]), key=va.get)[:3]
        parts = [f"vocab sizes {len(va)} vs {len(vb)}"]
        if only_a:
            parts.append(f"only in target: {only_a}")
        if only_b:
            parts.append(f"only in draft: {only_b}")
        if moved:
            parts.append("different ids for " + ", ".join(f"{t!r} ({va[t]} vs {vb[t]})" for t in moved))
        return "; ".join(parts)
    if tok_a.eos_token_id != tok_b.eos_token_id:
        return f"different EOS ids {tok_a.eos_token_id} vs {tok_b.eos_token_id}"
    return None


def shared_vocab_size(target, draft, tokenizer) -> int:
    """The logit range both models share; it must cover every token the tokenizer can produce."""
    vt = target.get_output_embeddings().weight.shape[0]
    vd = draft.get_output_embeddings().weight.shape[0]
    n_tok = len(tokenizer)
    shared = min(vt, vd)
    if shared < n_tok:
        raise JudgekitError(
            f"incompatible pair: output vocab sizes {vt} (target) / {vd} (draft) do not cover the "
            f"tokenizer's {n_tok} tokens"
        )
    return shared


def load_model_pair(target: str, draft: str, device: str = "auto", dtype: str = "auto") -> ModelPair:
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    tok_t = load_tokenizer(target)
    tok_d = load_tokenizer(draft)
    diff = tokenizer_mismatch(tok_t, tok_d)
    if diff:
        raise JudgekitError(f"incompatible pair {target!r} / {draft!r}: tokenizers differ: {diff}")
    target_model = load_model(target, dev, dt)
    draft_model = load_model(draft, dev, dt)
    vocab = shared_vocab_size(target_model, draft_model, tok_t)
    return ModelPair(target_model, draft_model, tok_t, target, draft, vocab, dev)


def cache_arg(model) -> str:
    """The forward argument that takes a KV cache: `cache` in transformers >= 5.2x, `past_key_values` before
    (the old name is deprecated there, and an unknown keyword would silently run without a cache)."""
    return _cache_arg_of(type(model))


@functools.lru_cache(maxsize=None)
def _cache_arg_of(cls: type) -> str:
    params = inspect.signature(cls.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def format_prompt(tokenizer, text: str, chat_template: bool = True) -> str:
    """Wrap a user message in the tokenizer's chat template when it has one (and it is wanted); the one
    renderer is `judgekit.tasks.common.render_prompt` (tasks and the decoder must format alike)."""
    from judgekit.tasks.common import render_prompt

    return render_prompt(text, tokenizer, chat_template)


def encode_prompt(tokenizer, prompt: str) -> list[int]:
    """Token ids of an already formatted prompt; a chat template carries its own BOS, so add none then."""
    has_template_bos = bool(tokenizer.bos_token) and prompt.startswith(tokenizer.bos_token)
    ids = tokenizer(prompt, add_special_tokens=not has_template_bos)["input_ids"]
    if not ids:
        raise JudgekitError("the prompt encodes to zero tokens")
    return ids
