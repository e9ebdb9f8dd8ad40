"""The miner's forwards: each problem keeps one row per model on a KV-rows backend (:mod:`judgekit.decode.rows`).

Mining runs many independent problems whose sequences grow, shrink (a rollout is abandoned) and share
prefixes in different ways. :class:`RowFeeder` remembers the token ids each row holds; :meth:`RowFeeder.feed`
crops every row to its longest common prefix with the sequence now wanted (the protocol's crop-to-start),
feeds only the rest, and runs the pending forwards of several problems as one batched forward. The backend
is the decoder's: the static cache on Llama / Qwen2 pairs, transformers caches otherwise — the same rows
decoding uses, so the miner has no KV code of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from judgekit.decode.rows import KVRows, Row, last_cols, pad_ids


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


class RowFeeder:
    """Rows of one model for the miner: :meth:`acquire` a row per problem, :meth:`release` it when done."""

    def __init__(self, rows: KVRows):
        self.rows = rows
        self.held: dict[Row, list[int]] = {}  # the token ids whose keys each row holds

    def acquire(self) -> Row:
        row = self.rows.acquire()
        self.held[row] = []
        return row

    def release(self, row: Row) -> None:
        del self.held[row]
        self.rows.release(row)

    def holds(self, row: Row, ids: list[int]) -> None:
        """Record that ``row`` now holds ``ids`` (after a forward outside :meth:`feed`: a speculative step)."""
        self.held[row] = ids

    def feed(self, rows: list[Row], seqs: list[list[int]], *, all_positions: bool = False,
             hidden_layers: tuple[int, ...] = ()) -> list[FeedResult]:
        """Make each row hold its sequence; return greedy predictions (and hidden states) for each row.

        ``all_positions``: predictions after every recomputed position (teacher forcing), else after the last
        token only (generation). At least the last token of each sequence is always recomputed.
        """
        commons = [min(common_prefix_len(self.held[r], s), len(s) - 1) for r, s in zip(rows, seqs)]
        new = [s[c:] for s, c in zip(seqs, commons)]
        dev = self.rows.device
        ids, lengths = pad_ids(new, dev)
        cols = None if all_positions else last_cols(lengths, dev)
        logits, states = self.rows.forward(rows, ids, commons, lengths, logit_cols=cols,
                                           hidden_layers=tuple(hidden_layers))
        preds_host = logits.argmax(-1).tolist()  # the one host sync of the step
        for row, seq in zip(rows, seqs):
            self.held[row] = list(seq)
        return feed_results(commons, new, preds_host, dict(zip(hidden_layers, states)),
                            torch.tensor([n - 1 for n in lengths], device=dev), all_positions)
