"""Which KV-rows backend a pair runs on, and the shared fast forwards of the static one.

``fast="auto"`` takes the static-cache backend (:mod:`judgekit.decode.staticrows`) when both models support
it and the transformers backend (:class:`judgekit.decode.rows.ModelRows`) otherwise; ``True`` insists (a
clear error otherwise), ``False`` never takes it. Decoding, mining and evaluation choose here, once.
"""

from __future__ import annotations

import weakref

from judgekit.errors import JudgekitError


def fast_models(pair, fast: bool | str, compile: bool = False):
    """(target, draft) :class:`judgekit.decode.fastmodel.FastLM` forwards, or None for the transformers backend."""
    from judgekit.decode.fastmodel import fast_unsupported

    if fast not in (True, False, "auto"):
        raise JudgekitError(f"fast must be True, False or 'auto', got {fast!r}")
    if fast is False:
        return None
    reasons = [r for r in (fast_unsupported(pair.target), fast_unsupported(pair.draft)) if r]
    if reasons:
        if fast is True:
            raise JudgekitError(f"no fast path for this pair: {reasons[0]}")
        return None
    return fast_lm(pair.target, compile), fast_lm(pair.draft, compile)


# One FastLM per (model, compile), shared between decoders: a sweep of many rules (one decoder each) fuses a
# model's weights once. The fused weights are the model's own (fastmodel._fuse), so sharing costs nothing.
_FAST_LMS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _weights_version(model) -> tuple:
    # In-place updates of the weights (training, perturbation) bump tensor versions; a moved or replaced
    # weight changes its address. Either means the forward must be rebuilt.
    params = list(model.parameters())
    return tuple(p.data_ptr() for p in params), sum(p._version for p in params)


def fast_lm(model, compile: bool = False):
    """The model's shared :class:`FastLM`, rebuilt when its weights changed since it was built."""
    from judgekit.decode.fastmodel import FastLM

    per_model = _FAST_LMS.setdefault(model, {})
    cached = per_model.get(compile)
    if cached is None or cached[0] != _weights_version(model):
        lm = FastLM(model, compile=compile)
        # Versioned after building: fusing rebinds the parameters to views of the fused tensors.
        per_model[compile] = cached = (_weights_version(model), lm)
    return cached[1]


def make_rows(model, vocab: int, lm=None, max_len: int = 512, graphs=None):
    """A KV-rows backend for ``model``: static rows over ``lm`` when given, else transformers rows."""
    if lm is not None:
        from judgekit.decode.staticrows import StaticRows

        return StaticRows(lm, vocab, max_len, graphs)
    from judgekit.decode.rows import ModelRows

    return ModelRows(model, vocab)


def held_bytes(model, lm) -> int:
    """Bytes a backend holds for ``model`` beyond its own parameters and buffers, KV caches aside
    (the static backend: its RoPE tables and any weight copy; the transformers backend: nothing)."""
    if lm is None:
        return 0
    from judgekit.decode.fastmodel import extra_bytes

    return extra_bytes(model, lm.tensors())
