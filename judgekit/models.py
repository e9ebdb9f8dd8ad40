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


@dataclass(frozen=True)
class LoadOptions:
    """How to fetch and place one model, beyond its name: what `--revision`, `--trust-remote-code` and
    `--device-map` say. Quantised checkpoints (a ``quantization_config`` in config.json: GPTQ, AWQ,
    bitsandbytes, ...) need no option: transformers reads it, and judgekit then places them with a device map
    instead of ``.to(device)`` (a quantised model cannot be moved)."""

    revision: str | None = None  # hub branch, tag or commit (hub ids only)
    trust_remote_code: bool = False  # run the checkpoint's own modelling code (needed by some hub models)
    device_map: str | None = None  # accelerate's placement ("auto", "balanced", ...); None: all on --device

    def __post_init__(self) -> None:
        if self.device_map is not None and self.device_map not in DEVICE_MAPS:
            raise JudgekitError(f"unknown device map {self.device_map!r}; use {', '.join(DEVICE_MAPS)}")


DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")


@dataclass
class ModelPair:
    target: Any
    draft: Any
    tokenizer: Any
    target_name: str
    draft_name: str
    vocab_size: int  # shared logit range used for decoding
    device: torch.device  # where inputs go: the target's embedding (its first shard under a device map)
    options: tuple[LoadOptions, LoadOptions] = (LoadOptions(), LoadOptions())  # (target, draft), for provenance

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


def _hub_kwargs(name: str, path: str, options: LoadOptions) -> dict[str, Any]:
    """from_pretrained's revision / trust_remote_code arguments; a revision of a local directory is refused
    (it would be silently ignored)."""
    if options.revision is not None and os.path.isdir(path):
        raise JudgekitError(f"--revision applies to hub ids; {name!r} is a local directory")
    kwargs: dict[str, Any] = {"trust_remote_code": options.trust_remote_code}
    if options.revision is not None:
        kwargs["revision"] = options.revision
    return kwargs


def load_tokenizer(name: str, options: LoadOptions = LoadOptions()):
    from transformers import AutoTokenizer

    path = resolve_model_path(name)
    kwargs = _hub_kwargs(name, path, options)
    try:
        return AutoTokenizer.from_pretrained(path, **kwargs)
    except Exception as err:  # noqa: BLE001 - hub/IO errors come in many types; report them in one line
        raise JudgekitError(f"cannot load tokenizer {name!r}: {_first_line(err)}") from None


def is_quantised(config) -> bool:
    return getattr(config, "quantization_config", None) is not None


def placement_kwargs(options: LoadOptions, device: torch.device, quantised: bool) -> dict[str, Any]:
    """from_pretrained's device_map: accelerate's named placement when asked, the one device for a quantised
    checkpoint (it is loaded in place), none otherwise (the model is loaded, then moved with ``.to``)."""
    if options.device_map is not None:
        try:
            import accelerate  # noqa: F401 - transformers needs it for any device_map
        except ImportError:
            raise JudgekitError("--device-map needs accelerate: pip install 'judgekit[sharded]'") from None
        return {"device_map": options.device_map}
    return {"device_map": {"": str(device)}} if quantised else {}


def load_model(name: str, device: torch.device, dtype: torch.dtype, options: LoadOptions = LoadOptions()):
    from transformers import AutoConfig, AutoModelForCausalLM

    path = resolve_model_path(name)
    kwargs = _hub_kwargs(name, path, options)
    try:
        config = AutoConfig.from_pretrained(path, **kwargs)
        placement = placement_kwargs(options, device, is_quantised(config))
        model = AutoModelForCausalLM.from_pretrained(path, config=config, dtype=dtype, **kwargs, **placement)
    except JudgekitError:
        raise
    except Exception as err:  # noqa: BLE001
        raise JudgekitError(f"cannot load model {name!r}: {_first_line(err)}") from None
    _LOADED[name] = {"revision": options.revision, "commit": resolved_commit(name, options.revision),
                     "config_sha256": config_sha256(model.config), "loaded": True}
    return (model if placement else model.to(device)).eval()


# name -> how this process loaded it (the provenance of artefacts it writes; judgekit.provenance reads it)
_LOADED: dict[str, dict[str, Any]] = {}


def loaded_model_info(name: str) -> dict[str, Any] | None:
    """Revision, resolved hub commit and config hash of the model last loaded under ``name``, if any."""
    info = _LOADED.get(name)
    return dict(info) if info else None


def config_sha256(config) -> str:
    """Hash of a model's configuration, without the fields that name where or by which version it was saved."""
    import hashlib
    import json

    d = {k: v for k, v in config.to_dict().items() if k not in ("transformers_version", "_name_or_path")}
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()


def resolved_commit(name: str, revision: str | None = None) -> str | None:
    """The hub commit a hub id at ``revision`` resolved to (its cached snapshot), None for a local directory or
    a model not in the cache. Read from the cache layout, so it costs no network call."""
    if name in POCKET_ALIASES or os.path.isdir(os.path.expanduser(name)):
        return None
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(name, "config.json", revision=revision)
    return Path(found).parent.name if isinstance(found, str) else None


def input_device(model) -> torch.device:
    """Where a model's inputs go: its embedding's device (the first shard of a device-mapped model; accelerate's
    hooks bring the outputs back there)."""
    return model.get_input_embeddings().weight.device


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


def load_model_pair(target: str, draft: str, device: str = "auto", dtype: str = "auto", *,
                    target_options: LoadOptions = LoadOptions(),
                    draft_options: LoadOptions = LoadOptions()) -> ModelPair:
    """Load and check a pair. Under a target ``device_map`` the draft goes where the target's inputs go
    (its first shard) unless the draft has a device map of its own."""
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    tok_t = load_tokenizer(target, target_options)
    tok_d = load_tokenizer(draft, draft_options)
    diff = tokenizer_mismatch(tok_t, tok_d)
    if diff:
        raise JudgekitError(f"incompatible pair {target!r} / {draft!r}: tokenizers differ: {diff}")
    target_model = load_model(target, dev, dt, target_options)
    dev = input_device(target_model)
    draft_model = load_model(draft, dev, dt, draft_options)
    if input_device(draft_model) != dev:
        raise JudgekitError(f"the draft's inputs go to {input_device(draft_model)} but the target's to {dev}; "
                            "give the draft no device map (it then joins the target's first device)")
    vocab = shared_vocab_size(target_model, draft_model, tok_t)
    return ModelPair(target_model, draft_model, tok_t, target, draft, vocab, dev, (target_options, draft_options))


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
