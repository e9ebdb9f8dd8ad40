"""CUDA-graph replay of the fast path's decoding forwards (docs/design.md §8).

On a GPU a small decoding step is launch-bound: a 7B forward at batch 1 issues hundreds of kernels whose
launch cost exceeds their memory traffic. A CUDA graph records those launches once and replays them as one. A
graph needs fixed shapes and addresses, so :class:`GraphedLM` calls :meth:`FastLM.forward` in its *static
form*: every row's start position is a device tensor, attention reads the whole preallocated cache (``kv_len``
= ``max_len``; slots past a row's position are masked, exactly as stale slots are in the dynamic form), and
logits are taken at explicit columns. A step's shapes then depend only on (batch, new tokens, logit columns),
so each decoding shape is captured once, on first use, and its inputs are copied into the graph's buffers on
every replay. A cache that was reallocated (rows left the batch) gets new graphs.

The static form is an ordinary forward, so it is tested on CPU against the dynamic form (``capture=False``
runs it without capturing); the capture itself needs CUDA.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from judgekit.decode.fastmodel import FastLM, StaticCache


@dataclass
class _Graph:
    graph: "torch.cuda.CUDAGraph"
    ids: Tensor
    start: Tensor
    cols: Tensor
    logits: Tensor
    hidden: Tensor | None


class GraphedLM:
    """:meth:`forward` with :meth:`FastLM.forward`'s signature, replayed from CUDA graphs (``capture=True``)
    or run eagerly in the same static form (``capture=False``, for CPU tests)."""

    def __init__(self, lm: FastLM, capture: bool | None = None):
        self.lm = lm
        self.capture = lm.device.type == "cuda" if capture is None else capture
        if self.capture and lm.device.type != "cuda":
            raise ValueError("CUDA graphs need a CUDA device")
        self._graphs: dict[tuple, _Graph] = {}
        self._pool = None

    def static_args(self, ids: Tensor, start: Tensor | int, logit_cols: Tensor | None) -> tuple[Tensor, Tensor]:
        """(start [B], logit columns [B, C]) as device tensors, whatever form the caller gave."""
        B, T = ids.shape
        dev = ids.device
        if isinstance(start, int):
            start = torch.full((B,), start, dtype=torch.long, device=dev)
        if logit_cols is None:
            cols = torch.arange(T, device=dev).expand(B, T)
        elif logit_cols.dim() == 1:
            cols = logit_cols.expand(B, -1)
        else:
            cols = logit_cols
        return start, cols.contiguous()

    def forward(self, ids: Tensor, start: Tensor | int, cache: StaticCache, kv_len: int, *,
                logit_cols: Tensor | None = None, hidden_layer: int | None = None) -> tuple[Tensor, Tensor | None]:
        start, cols = self.static_args(ids, start, logit_cols)
        if not self.capture:
            return self.lm.forward(ids, start, cache, cache.max_len, logit_cols=cols, hidden_layer=hidden_layer)
        B, T = ids.shape
        # A graph writes to the addresses it was captured with: key it on every cache tensor's address (a new
        # cache may reuse some of a freed one's addresses, never all of them by chance with the same shapes).
        live = (cache.max_len, *(t.data_ptr() for t in cache.keys), *(t.data_ptr() for t in cache.values))
        key = (B, T, cols.shape[1], hidden_layer, live)
        g = self._graphs.get(key)
        if g is None:
            # Graphs of a cache that was reallocated can never replay again: free their memory.
            self._graphs = {k: v for k, v in self._graphs.items() if k[4] == live}
            g = self._graphs[key] = self._capture(ids, start, cols, cache, hidden_layer)
        g.ids.copy_(ids)
        g.start.copy_(start)
        g.cols.copy_(cols)
        g.graph.replay()
        # Copies: the next replay overwrites the graph's output buffers.
        return g.logits.clone(), None if g.hidden is None else g.hidden.clone()

    def _capture(self, ids: Tensor, start: Tensor, cols: Tensor, cache: StaticCache,
                 hidden_layer: int | None) -> _Graph:
        ids_b, start_b, cols_b = ids.clone(), start.clone(), cols.clone()

        def run():
            return self.lm.forward(ids_b, start_b, cache, cache.max_len, logit_cols=cols_b, hidden_layer=hidden_layer)

        # Warm-up on a side stream (allocator and kernel selection), as torch.cuda.graphs requires. The
        # warm-up writes the same cache slots the real call will write next, with the same values.
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            run()
        torch.cuda.current_stream().wait_stream(stream)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            logits, hidden = run()
        return _Graph(graph, ids_b, start_b, cols_b, logits, hidden)
