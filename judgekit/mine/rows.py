"""One forward pass for several sequences that each keep their own KV cache.

Mining runs many independent problems whose sequences grow, shrink (a rollout is abandoned) and share
prefixes in different ways, so no single transformers cache can hold them. Each sequence keeps its own
per-layer key/value tensors and the token ids they cover (a :class:`RowCache`); :func:`feed` crops every row to
its longest common prefix with the sequence now wanted, left-pads the kept caches to one length,
right-pads the new tokens, runs the model once with a padding mask and explicit position ids, and gives
every row back its own slice. We write this ourselves because transformers' caches crop all rows by the
same amount; with one row there is no padding and the forward is the plain cached one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import DynamicCache

from judgekit.models import cache_arg


@dataclass
class RowCache:
    """One sequence's KV state: either a live transformers cache (while it runs alone, so a decoding step
    costs no rebuild) or per-layer key/value tensors [1, heads, len(ids), dim] (after a batched step)."""

    ids: list[int] = field(default_factory=list)
    keys: list[torch.Tensor] = field(default_factory=list)
    values: list[torch.Tensor] = field(default_factory=list)
    cache: DynamicCache | None = None

    def layer_kv(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.cache is not None:
            return self.cache.layers[layer].keys, self.cache.layers[layer].values
        return self.keys[layer], self.values[layer]

    @property
    def n_layers(self) -> int:
        return len(self.cache.layers) if self.cache is not None else len(self.keys)


@dataclass
class FeedResult:
    common: int  # tokens of the sequence that were already cached (not recomputed)
    argmax: list[int]  # greedy prediction after each recomputed position (or after the last one only)
    hidden: dict[int, np.ndarray] | None  # layer -> [positions, H] float16 at the same positions


def common_prefix_len(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    return next(i for i in range(n) if a[i] != b[i])


def _single_cache(model, row: RowCache, common: int) -> DynamicCache:
    """The row's own cache cropped to ``common`` tokens (built once, then reused step after step)."""
    if row.cache is None:
        row.cache = _build_cache(model, [row], [common], common)
        row.keys, row.values = [], []
    elif len(row.ids) > common:
        row.cache.crop(-(len(row.ids) - common))
    return row.cache


def _build_cache(model, rows: list[RowCache], commons: list[int], past: int) -> DynamicCache:
    cache = DynamicCache(config=model.config)
    if past == 0:
        return cache
    ref = rows[commons.index(past)]
    for layer in range(ref.n_layers):
        ks, vs = [], []
        for row, c in zip(rows, commons):
            if c == 0:  # a fresh row next to cached ones: all of its slots are padding
                k = v = torch.zeros_like(ref.layer_kv(layer)[0][..., :0, :])
            else:
                k, v = (t[..., :c, :] for t in row.layer_kv(layer))
            if c < past:  # left-pad: padded slots are masked out
                pad = (0, 0, past - c, 0)
                k, v = torch.nn.functional.pad(k, pad), torch.nn.functional.pad(v, pad)
            ks.append(k)
            vs.append(v)
        # Install the tensors directly: Cache.update would concatenate, i.e. copy the whole cache once more.
        target = cache.layers[layer]
        target.lazy_initialization(ks[0], vs[0])
        target.keys = ks[0] if len(ks) == 1 else torch.cat(ks, 0)
        target.values = vs[0] if len(vs) == 1 else torch.cat(vs, 0)
    return cache


@torch.inference_mode()
def feed(model, rows: list[RowCache], seqs: list[list[int]], vocab: int, *, all_positions: bool = False,
         hidden_layers: tuple[int, ...] = ()) -> list[FeedResult]:
    """Make each row's cache hold its sequence; return greedy predictions (and hidden states) for each row.

    ``all_positions``: predictions after every recomputed position (teacher forcing), else after the last
    token only (generation). At least the last token of each sequence is always recomputed.
    """
    device = next(model.parameters()).device
    commons = [min(common_prefix_len(r.ids, s), len(s) - 1) for r, s in zip(rows, seqs)]
    new = [s[c:] for s, c in zip(seqs, commons)]
    past, width = max(commons), max(len(x) for x in new)
    single = len(rows) == 1
    cache = _single_cache(model, rows[0], past) if single else _build_cache(model, rows, commons, past)
    input_ids = torch.zeros(len(rows), width, dtype=torch.long)
    for i, toks in enumerate(new):
        input_ids[i, : len(toks)] = torch.tensor(toks)
    kwargs = {}
    if not single:
        mask = torch.zeros(len(rows), past + width, dtype=torch.long)
        positions = torch.zeros(len(rows), width, dtype=torch.long)
        for i, (c, toks) in enumerate(zip(commons, new)):
            mask[i, past - c: past + len(toks)] = 1
            positions[i] = c + torch.arange(width)
        kwargs = {"attention_mask": mask.to(device), "position_ids": positions.to(device)}
    last = torch.tensor([len(t) - 1 for t in new], device=device)
    if all_positions:
        keep = torch.arange(width, device=device)
    elif single:
        keep = last  # the row's last position is the only one
    else:
        keep = torch.unique(last)
    out = model(input_ids=input_ids.to(device), **{cache_arg(model): cache}, use_cache=True, logits_to_keep=keep,
                output_hidden_states=bool(hidden_layers), **kwargs)
    if all_positions:
        preds = out.logits[..., :vocab].argmax(-1)  # [B, width]
    else:
        col = torch.searchsorted(keep, last)
        preds = out.logits[torch.arange(len(rows), device=device), col, :vocab].argmax(-1).unsqueeze(1)
    preds_host = preds.tolist()  # the one host sync of the step
    states = {layer: out.hidden_states[layer] for layer in hidden_layers}
    for i, (row, seq, c, toks) in enumerate(zip(rows, seqs, commons, new)):
        row.ids = list(seq)
        if not single:  # hand every row its own slice of the batched cache
            lo, hi = past - c, past + len(toks)
            row.keys = [layer.keys[i: i + 1, :, lo:hi] for layer in cache.layers]
            row.values = [layer.values[i: i + 1, :, lo:hi] for layer in cache.layers]
            row.cache = None
    return feed_results(commons, new, preds_host, states, last, all_positions)


def feed_results(commons: list[int], new: list[list[int]], preds_host: list[list[int]],
                 states: dict[int, torch.Tensor], last: torch.Tensor, all_positions: bool) -> list[FeedResult]:
    """Each row's FeedResult from the step's host predictions and hidden states [B, T, H] (by layer); only the
    positions returned leave the device, as float16."""
    hidden_host = None
    if states:
        rows_idx = torch.arange(len(new), device=last.device)
        pick = (lambda h: h) if all_positions else (lambda h: h[rows_idx, last].unsqueeze(1))
        hidden_host = {layer: pick(h).float().cpu().numpy().astype(np.float16) for layer, h in states.items()}
    results = []
    for i, (c, toks) in enumerate(zip(commons, new)):
        n = len(toks)
        argmax = preds_host[i][:n] if all_positions else preds_host[i]
        hidden = None
        if hidden_host is not None:
            hidden = {layer: h[i, :n] if all_positions else h[i] for layer, h in hidden_host.items()}
        results.append(FeedResult(c, argmax, hidden))
    return results


class ModelRows:
    """The per-problem KV state of one model on the transformers path: each problem gets its own
    :class:`RowCache`, and :meth:`feed` is :func:`feed`. :class:`judgekit.mine.fastrows.FastRows` is the same
    interface on the fast path's static cache, so the miner drives either without knowing which."""

    def __init__(self, model, vocab: int):
        self.model, self.vocab = model, vocab

    def acquire(self) -> RowCache:
        return RowCache()

    def release(self, row: RowCache) -> None:
        pass

    def feed(self, rows: list[RowCache], seqs: list[list[int]], *, all_positions: bool = False,
             hidden_layers: tuple[int, ...] = ()) -> list[FeedResult]:
        return feed(self.model, rows, seqs, self.vocab, all_positions=all_positions, hidden_layers=hidden_layers)

