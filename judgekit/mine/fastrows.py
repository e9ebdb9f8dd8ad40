"""The miner's forwards on the fast path: each problem being mined owns one row of a static KV cache.

:func:`judgekit.mine.rows.feed` keeps a transformers cache per problem and, to batch problems, rebuilds one
left-padded cache from theirs on every step (copies, padding) before running the eager model. On Llama / Qwen2
pairs :class:`FastRows` does the same job with :class:`judgekit.decode.fastmodel.FastLM`: a row keeps the token ids
whose keys and values sit at its positions ``0 .. len - 1``, so cropping to the common prefix with the next
sequence is only a start position, and a batch of problems is one forward over their rows, nothing copied.
Its results are :class:`judgekit.mine.rows.FeedResult`, field for field what ``feed`` returns (tested).
"""

from __future__ import annotations

import torch

from judgekit.mine.rows import FeedResult, common_prefix_len, feed_results
from judgekit.decode.fastmodel import FastLM


class FastRows:
    """``slots`` cache rows of one model; :meth:`acquire` a row per problem, :meth:`release` it when done."""

    def __init__(self, lm: FastLM, vocab: int, slots: int, max_len: int = 512):
        self.lm, self.vocab = lm, vocab
        self.cache = lm.new_cache(slots, max_len)
        self.ids: list[list[int]] = [[] for _ in range(slots)]
        self._free = list(range(slots))

    def acquire(self) -> int:
        row = self._free.pop(0)
        self.ids[row] = []
        return row

    def release(self, row: int) -> None:
        self.ids[row] = []
        self._free.append(row)

    def _grow(self, need: int) -> None:
        """A longer cache (sequences outgrew it), the rows' contents kept."""
        old = self.cache
        new = self.lm.new_cache(len(old.keys[0]), max(need, 2 * old.max_len))
        for src, dst in zip(old.keys + old.values, new.keys + new.values):
            dst[:, :, : old.max_len] = src
        self.cache = new

    @torch.inference_mode()
    def feed(self, rows: list[int], seqs: list[list[int]], *, all_positions: bool = False,
             hidden_layers: tuple[int, ...] = ()) -> list[FeedResult]:
        """As :func:`judgekit.mine.rows.feed`, for the problems holding ``rows``."""
        dev = self.lm.device
        commons = [min(common_prefix_len(self.ids[r], s), len(s) - 1) for r, s in zip(rows, seqs)]
        new = [s[c:] for s, c in zip(seqs, commons)]
        width = max(len(x) for x in new)
        need = max(c + width for c in commons)  # padded columns write (unread) slots up to here
        if need > self.cache.max_len:
            self._grow(need)
        ids = torch.zeros(len(rows), width, dtype=torch.long)
        for i, toks in enumerate(new):
            ids[i, : len(toks)] = torch.tensor(toks)
        ids = ids.to(dev)
        last = [len(t) - 1 for t in new]
        layers = tuple(hidden_layers) if hidden_layers else None
        if len(rows) == 1:  # one row: a view of it, host positions (cache writes by slicing)
            view = self.cache.row_view(rows[0])
            cols = None if all_positions else torch.tensor(last, device=dev)
            logits, states = self.lm.forward(ids, commons[0], view, need, logit_cols=cols, hidden_layer=layers)
        else:
            everyone = rows == list(range(len(self.cache.keys[0])))
            cache_rows = None if everyone else torch.tensor(rows, device=dev)
            cols = None if all_positions else torch.tensor(last, device=dev)[:, None]
            logits, states = self.lm.forward(ids, torch.tensor(commons, device=dev), self.cache, need,
                                             logit_cols=cols, hidden_layer=layers, cache_rows=cache_rows)
        preds_host = logits[..., :self.vocab].argmax(-1).tolist()  # the one host sync of the step
        for row, seq in zip(rows, seqs):
            self.ids[row] = list(seq)
        return feed_results(commons, new, preds_host, dict(zip(layers or (), states or ())),
                            torch.tensor(last, device=dev), all_positions)
