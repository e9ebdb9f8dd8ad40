"""The KV-rows protocol (:mod:`judgekit.decode.rows`) on the fast path's preallocated static cache.

Every row owns one batch row (slot) of a :class:`judgekit.decode.fastmodel.StaticCache`; its keys and values
sit at positions ``0 .. len - 1``, so crop-to-start is the start position itself and nothing is ever copied.
A forward over all live slots in slot order runs on the cache directly; a subset runs on those rows of it
(``cache_rows``); one row runs on a view of its slot with host positions (writes by slicing, no mask for a
one-token step). Slots of released rows are reused by the next acquire; when a forward covers every live
row and some slots are free, the cache shrinks to the live ones once (the batch runs no dead rows).
Decoding steps (``replay=True``) may run through CUDA graphs (:mod:`judgekit.decode.cudagraphs`), which need
the whole cache in slot order.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from judgekit.decode.fastmodel import FastLM
from judgekit.decode.rows import Row


class StaticRows:
    """Rows of one :class:`FastLM`'s static cache, ``max_len`` positions each (grown when outgrown)."""

    def __init__(self, lm: FastLM, vocab: int, max_len: int = 512, graphs=None):
        self.lm, self.vocab, self.device = lm, vocab, lm.device
        self.graphs = graphs  # a GraphedLM for replayed decoding steps, or None
        self.max_len = max_len
        self.cache = None  # allocated by the first forward, for the slots acquired by then
        self.slots: list[Row | None] = []

    @torch.inference_mode()  # the row state is made of inference tensors (forward runs in inference mode)
    def acquire(self) -> Row:
        if None in self.slots:
            s = self.slots.index(None)
        else:
            s = len(self.slots)
            self.slots.append(None)
            if self.cache is not None:
                self._resize(len(self.slots), self.cache.max_len, list(range(s)))
        row = self.slots[s] = Row(s)
        return row

    @torch.inference_mode()
    def release(self, row: Row) -> None:
        self.slots[row.slot] = None

    def _resize(self, slots: int, max_len: int, keep: list[int]) -> None:
        """A new cache of ``slots`` rows x ``max_len`` positions holding old slots ``keep`` in its first rows."""
        old = self.cache
        self.cache = self.lm.new_cache(slots, max_len)
        idx = torch.tensor(keep, dtype=torch.long, device=self.lm.device)
        n = min(old.max_len, max_len)
        for src, dst in zip(old.keys + old.values, self.cache.keys + self.cache.values):
            dst[: len(keep), :, :n] = src.index_select(0, idx)[:, :, :n]

    def _shrink(self, used: list[int]) -> None:
        self._resize(len(used), self.cache.max_len, used)
        self.slots = [self.slots[s] for s in used]
        for s, row in enumerate(self.slots):
            row.slot = s

    def forward(self, rows: Sequence[Row], ids: Tensor, starts: Sequence[int], lengths: Sequence[int] | None = None,
                *, logit_cols: Tensor | None = None, hidden_layers: tuple[int, ...] = (), replay: bool = False,
                tree: tuple[Tensor, Tensor, Tensor] | None = None) -> tuple[Tensor, tuple[Tensor, ...]]:
        """The protocol's forward; ``tree`` (slots, positions, mask offsets: :meth:`FastLM.forward`) feeds
        draft-tree columns, never through a CUDA graph."""
        # Inference mode, entered here only when the caller has not: the decorator's context manager costs
        # ~7 Python calls per forward, a few per cent of a batch-1 step of a small model.
        if not torch.is_inference_mode_enabled():
            with torch.inference_mode():
                return self.forward(rows, ids, starts, lengths, logit_cols=logit_cols, hidden_layers=hidden_layers,
                                    replay=replay, tree=tree)
        B, T = ids.shape
        dev = self.lm.device
        need = max(starts) + (T if tree is None else max(T, int(tree[2].shape[1])))  # padded columns write
        # (never read) slots up to here
        if self.cache is None:
            self.cache = self.lm.new_cache(len(self.slots), max(self.max_len, need))
        elif need > self.cache.max_len:
            self._resize(len(self.slots), max(need, 2 * self.cache.max_len), list(range(len(self.slots))))
        if None in self.slots:  # free slots: shrink once a forward covers every live row
            used = [s for s, r in enumerate(self.slots) if r is not None]
            if sorted(r.slot for r in rows) == used:
                self._shrink(used)
        want = [r.slot for r in rows]
        layers = tuple(hidden_layers) or None
        cols = logit_cols
        # One row (batch size 1, or a lone prefill): a view of it with host positions, so cache writes are
        # slices and a one-token step needs no mask (tensor positions cost ~25 % of a batch-1 decode on CPU).
        # Replayed graphs need the whole cache with tensor positions, so they keep the general forward; so does a
        # tree (its nodes' slots and positions differ).
        if B == 1 and not (replay and self.graphs is not None) and tree is None:
            view = self.cache if len(self.slots) == 1 else self.cache.row_view(want[0])
            cols = None if cols is None else cols[0]
            logits, states = self.lm.forward(ids, int(starts[0]), view, need, logit_cols=cols, hidden_layer=layers)
        else:
            start = torch.tensor(list(starts), dtype=torch.long, device=dev)
            everyone = want == list(range(len(self.slots)))
            if replay and everyone and self.graphs is not None and len(hidden_layers) <= 1 and tree is None:
                logits, state = self.graphs.forward(ids, start, self.cache, need, logit_cols=cols,
                                                    hidden_layer=hidden_layers[0] if hidden_layers else None)
                return logits[..., : self.vocab], (state,) if hidden_layers else ()
            cache_rows = None if everyone else torch.tensor(want, dtype=torch.long, device=dev)
            logits, states = self.lm.forward(ids, start, self.cache, need, logit_cols=cols, hidden_layer=layers,
                                             cache_rows=cache_rows, tree=tree)
        return logits[..., : self.vocab], tuple(states) if layers else ()

    @torch.inference_mode()
    def keep_path(self, rows: Sequence[Row], starts: Tensor, path: Tensor) -> None:
        """Commit each row's accepted tree path (node indices [B, D+1], -1 after the path): move its entries
        from slots start + node to start + 0 .., one gather and one scatter per layer (pads copy a slot onto
        itself). Their RoPE positions already equal the new slots, so this is exact."""
        idx = torch.arange(path.shape[1], device=path.device).expand_as(path)
        src = starts[:, None] + torch.where(path >= 0, path, idx)
        dst = starts[:, None] + idx
        r = torch.tensor([row.slot for row in rows], dtype=torch.long, device=path.device)[:, None]
        for t in self.cache.keys + self.cache.values:
            t[r, :, dst] = t[r, :, src]
