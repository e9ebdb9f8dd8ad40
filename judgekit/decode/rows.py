"""The KV-rows protocol every forward of decoding and mining goes through (docs/design.md §8), and its
transformers backend.

A backend holds the KV state of many sequences, one *row* each:

* ``acquire() -> Row`` a fresh, empty row; ``release(row)`` gives it back (its slot may be reused);
* ``forward(rows, ids [B, T], starts [B], lengths=None, *, logit_cols=None, hidden_layers=())
  -> (logits [B, C, V], states)``: row b reads ``ids[b, :lengths[b]]`` (right padding after it is ignored) at
  positions ``starts[b] ..``, after discarding whatever it held at or beyond ``starts[b]`` (crop to start:
  rollback is only a smaller start next time). Logits at the columns ``logit_cols`` [B, C] (all T if None);
  ``states`` are the hidden states [B, T, H] of ``hidden_layers`` (transformers' ``hidden_states`` indexing:
  0 = embeddings, -1 = final normed state), in that order. A row grows as its sequence does. ``replay``
  marks a decoding step (fixed small shapes) that a backend may replay from a CUDA graph. ``tree`` (slots,
  positions, mask) feeds draft-tree columns (:mod:`judgekit.decode.treedecode`): node slots and positions
  apart, visibility by a tree mask;
* ``keep_path(rows, starts [B], path [B, D+1])`` commits each row's accepted tree path after a tree step
  (static cache: gathers its K/V into consecutive slots; here: the path's columns stay, the others go).

Two backends implement it: :class:`judgekit.decode.staticrows.StaticRows` (the lean static-cache forward of
:mod:`judgekit.decode.fastmodel`, Llama / Qwen2) and :class:`ModelRows` here, for any transformers causal LM.
Callers (the speculative step, its drafters, the miner) never know which one they drive.

:class:`ModelRows` keeps the rows it serves as one batched transformers cache ``[S, heads, L, dim]`` with a
column mask: row s's valid keys are the columns where ``mask[s]`` is set, ``pos[s]`` their positions. A
forward appends T columns for every row of the batch; rolling a row back only clears mask bits (no copy),
so as long as the same rows are forwarded together (a decoding batch) the cache is never rebuilt. We write
this ourselves because transformers' own caches crop every row by the same amount. Columns that no row needs
any more are dropped by a vectorised gather when they outnumber the live ones; a forward over a subset of
the rows gathers that subset and scatters it back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import torch
from torch import Tensor
from transformers import DynamicCache

from judgekit.errors import JudgekitError
from judgekit.models import cache_arg


@dataclass(eq=False)
class Row:
    """A handle on one sequence's KV state; ``slot`` is where the backend keeps it (it may move)."""

    slot: int


class KVRows(Protocol):
    """The protocol of the module docstring."""

    vocab: int
    device: torch.device

    def acquire(self) -> Row: ...

    def release(self, row: Row) -> None: ...

    def forward(self, rows: Sequence[Row], ids: Tensor, starts: Sequence[int], lengths: Sequence[int] | None = None,
                *, logit_cols: Tensor | None = None, hidden_layers: tuple[int, ...] = (), replay: bool = False,
                tree: tuple[Tensor, Tensor, Tensor] | None = None) -> tuple[Tensor, tuple[Tensor, ...]]: ...

    def keep_path(self, rows: Sequence[Row], starts: Tensor, path: Tensor) -> None: ...


def pad_ids(seqs: Sequence[Sequence[int]], device) -> tuple[Tensor, list[int]]:
    """Right-padded ids [B, max len] (at least one column) and each row's length."""
    lengths = [len(s) for s in seqs]
    out = torch.zeros(len(seqs), max(1, max(lengths)), dtype=torch.long)
    for i, s in enumerate(seqs):
        if s:
            out[i, : len(s)] = torch.tensor(list(s))
    return out.to(device), lengths


def last_cols(lengths: Sequence[int], device) -> Tensor:
    """[B, 1] logit columns at each row's last real token."""
    return torch.tensor([max(n - 1, 0) for n in lengths], device=device)[:, None]


def plain_layers(model) -> str | None:
    """Why :class:`ModelRows` cannot serve ``model`` (None if it can): holes in a sliding-window or otherwise
    special cache layer would be wrong, so only plain full-attention layers are accepted."""
    from transformers.cache_utils import DynamicLayer

    cache = DynamicCache(config=model.config)
    if any(type(layer) is not DynamicLayer for layer in cache.layers):
        return "cache layers other than full attention (sliding windows, ...)"
    return None


class ModelRows:
    """The KV-rows protocol over a transformers causal LM of any architecture (module docstring)."""

    # Compact when dead columns exceed this many plus the live ones (bounds memory and attention width).
    SLACK = 64

    def __init__(self, model, vocab: int):
        reason = plain_layers(model)
        if reason is not None:
            raise JudgekitError(f"no transformers rows for this model: {reason}")
        self.model, self.vocab = model, vocab
        self.device = next(model.parameters()).device
        self._arg = cache_arg(model)
        self.slots: list[Row | None] = []  # batch row s of the cache belongs to slots[s] (None: free)
        self.keys: list[Tensor] = []  # per layer [S, heads, L, dim] (empty until the first forward)
        self.values: list[Tensor] = []
        self.mask = torch.zeros(0, 0, dtype=torch.bool, device=self.device)  # [S, L] valid columns
        self.pos = torch.zeros(0, 0, dtype=torch.long, device=self.device)  # [S, L] their positions
        # [S, L] each column's slot in the static backend's terms: its position, except a draft tree's columns
        # (start + node index) until :meth:`keep_path` commits a path (then position again)
        self.slot = torch.zeros(0, 0, dtype=torch.long, device=self.device)
        self.held: list[int] = []  # per slot, the positions it holds (0 .. held - 1): known on the host

    # -- rows ------------------------------------------------------------------------------------------------
    @torch.inference_mode()  # the row state is made of inference tensors (forward runs in inference mode)
    def acquire(self) -> Row:
        if None in self.slots:
            s = self.slots.index(None)
        else:  # a new batch row, all of its columns empty
            s = len(self.slots)
            self.slots.append(None)
            self.held.append(0)
            self.mask = torch.cat([self.mask, self.mask.new_zeros(1, self.mask.shape[1])])
            self.pos = torch.cat([self.pos, self.pos.new_zeros(1, self.pos.shape[1])])
            self.slot = torch.cat([self.slot, self.slot.new_zeros(1, self.slot.shape[1])])
            self.keys = [torch.cat([k, k.new_zeros(1, *k.shape[1:])]) for k in self.keys]
            self.values = [torch.cat([v, v.new_zeros(1, *v.shape[1:])]) for v in self.values]
        row = self.slots[s] = Row(s)
        return row

    @torch.inference_mode()
    def release(self, row: Row) -> None:
        self.slots[row.slot] = None
        self.held[row.slot] = 0
        self.mask[row.slot] = False

    def _select(self, keep: list[int]) -> None:
        """Keep only these batch rows, in this order (finished rows leave the batch)."""
        idx = torch.tensor(keep, dtype=torch.long, device=self.device)
        self.keys = [k.index_select(0, idx) for k in self.keys]
        self.values = [v.index_select(0, idx) for v in self.values]
        self.mask, self.pos = self.mask.index_select(0, idx), self.pos.index_select(0, idx)
        self.slot = self.slot.index_select(0, idx)
        self.slots = [self.slots[s] for s in keep]
        self.held = [self.held[s] for s in keep]
        for s, row in enumerate(self.slots):
            if row is not None:
                row.slot = s

    def _compact(self) -> None:
        """Drop the columns no row needs: each row's valid columns, in order, right-aligned (one gather)."""
        live = max(self.held, default=0)  # from the host: no device sync
        L = self.mask.shape[1]
        if L <= 2 * live + self.SLACK:
            return
        order = torch.sort(self.mask.long(), dim=1, stable=True).indices[:, L - live:]  # [S, live]
        self.mask, self.pos = self.mask.gather(1, order), self.pos.gather(1, order)
        self.slot = self.slot.gather(1, order)
        idx = lambda t: order[:, None, :, None].expand(t.shape[0], t.shape[1], live, t.shape[3])  # noqa: E731
        self.keys = [k.gather(2, idx(k)) for k in self.keys]
        self.values = [v.gather(2, idx(v)) for v in self.values]

    # -- the forward -----------------------------------------------------------------------------------------
    @torch.inference_mode()
    def forward(self, rows: Sequence[Row], ids: Tensor, starts: Sequence[int], lengths: Sequence[int] | None = None,
                *, logit_cols: Tensor | None = None, hidden_layers: tuple[int, ...] = (), replay: bool = False,
                tree: tuple[Tensor, Tensor, Tensor] | None = None) -> tuple[Tensor, tuple[Tensor, ...]]:
        """The protocol's forward (``replay``, a decoding step's hint to the static backend, is unused here).

        ``tree`` = (slots [T], positions [T], mask [T, W]), offsets from each start, feeds draft-tree columns
        with the static backend's meaning (:meth:`judgekit.decode.fastmodel.FastLM.forward`): column c takes
        slot start + slots[c] at position start + positions[c] and sees the slots before start plus the slots
        start + j with mask[c, j]; columns at slots from start + min(slots) on are dropped first (those
        before, an earlier level's nodes, stay). Attention then takes a 4D mask, which transformers' mask
        builders pass through as given (masking_utils._preprocess_mask_arguments)."""
        B, T = ids.shape
        dev = self.device
        lengths = [T] * B if lengths is None or tree is not None else list(lengths)
        used = [s for s, r in enumerate(self.slots) if r is not None]
        want = [r.slot for r in rows]
        if sorted(want) == used and len(used) < len(self.slots):
            self._select(used)  # rows left for good: the batch shrinks once
            want = [r.slot for r in rows]
        self._compact()
        everyone = want == list(range(len(self.slots)))
        sub = None if everyone else torch.tensor(want, dtype=torch.long, device=dev)
        pick = (lambda t: t) if sub is None else (lambda t: t.index_select(0, sub))  # noqa: E731
        start = torch.tensor(list(starts), dtype=torch.long, device=dev)
        n = torch.tensor(lengths, dtype=torch.long, device=dev)
        pos_old, slot_old = pick(self.pos), pick(self.slot)
        col = torch.arange(T, device=dev)
        if tree is None:
            # Crop to start: a row's keys at or beyond its start are dropped (their mask bits cleared).
            mask = pick(self.mask) & (slot_old < start[:, None])
            new_mask = col[None] < n[:, None]
            # Padded columns repeat the last real position: learned position tables (GPT-2, OPT) stay in range.
            positions = start[:, None] + torch.minimum(col[None], (n - 1).clamp(min=0)[:, None])
            slots = positions
        else:
            slot_off, pos_off, tmask = tree
            mask = pick(self.mask) & (slot_old < start[:, None] + slot_off.min())
            new_mask = torch.ones(B, T, dtype=torch.bool, device=dev)
            positions = start[:, None] + pos_off[None]
            slots = start[:, None] + slot_off[None]
        cache = DynamicCache(config=self.model.config)
        L = self.mask.shape[1]
        if L:
            for layer, k, v in zip(cache.layers, self.keys, self.values):
                layer.lazy_initialization(k, v)  # install directly: update() would copy once more
                layer.keys, layer.values = pick(k), pick(v)
        full_mask = torch.cat([mask, new_mask], 1)
        new_slot = torch.cat([slot_old, slots], 1)
        attention = full_mask.long() if tree is None else self._tree_mask(full_mask, new_slot, start, tmask)
        cols = (torch.arange(T, device=dev).expand(B, T) if logit_cols is None else logit_cols).contiguous()
        # A decoding step's few columns: logits everywhere, then gathered (no sync). A prefill's: only the
        # columns asked for (torch.unique syncs once, which a prefill can afford; the LM head cannot).
        keep = torch.unique(cols) if T > 16 and tree is None else None
        out = self.model(input_ids=ids, attention_mask=attention, position_ids=positions,
                         **{self._arg: cache}, use_cache=True, logits_to_keep=0 if keep is None else keep,
                         output_hidden_states=bool(hidden_layers))
        at = cols if keep is None else torch.searchsorted(keep, cols)
        logits = out.logits[torch.arange(B, device=dev)[:, None], at]
        states = tuple(out.hidden_states[h] for h in hidden_layers)
        keys = [layer.keys for layer in cache.layers]
        values = [layer.values for layer in cache.layers]
        new_pos = torch.cat([pos_old, positions], 1)
        width = None if tree is None else int(tree[2].shape[1])  # a tree's columns lie in slots start .. + W
        for r, st, m in zip(rows, starts, lengths):
            self.held[r.slot] = min(self.held[r.slot], int(st)) + (m if width is None else width)
        if sub is None:
            self.keys, self.values, self.mask, self.pos, self.slot = keys, values, full_mask, new_pos, new_slot
        else:  # scatter the subset back; the other rows get T empty columns
            S = len(self.slots)
            grow = lambda t, w: torch.cat([t, t.new_zeros(S, *t.shape[1:-2], w, t.shape[-1])], -2)  # noqa: E731
            if L:
                self.keys = [grow(k, T).index_copy_(0, sub, nk) for k, nk in zip(self.keys, keys)]
                self.values = [grow(v, T).index_copy_(0, sub, nv) for v, nv in zip(self.values, values)]
            else:
                self.keys = [k.new_zeros(S, *k.shape[1:]).index_copy_(0, sub, k) for k in keys]
                self.values = [v.new_zeros(S, *v.shape[1:]).index_copy_(0, sub, v) for v in values]
            widen = lambda t, new: torch.cat([t, t.new_zeros(S, T)], 1).index_copy_(0, sub, new)  # noqa: E731
            self.mask, self.pos, self.slot = widen(self.mask, full_mask), widen(self.pos, new_pos), \
                widen(self.slot, new_slot)
        return logits[..., : self.vocab], states

    def _tree_mask(self, valid: Tensor, slot: Tensor, start: Tensor, tmask: Tensor) -> Tensor:
        """The 4D additive attention mask [B, 1, T, L] of a tree forward: query c sees the valid columns at
        slots before start, and those at slot start + j where tmask[c, j] (additive floats in the model's
        dtype, which both the eager and the SDPA attention of transformers take)."""
        W = tmask.shape[1]
        rel = slot - start[:, None]  # [B, L]
        seen = tmask[:, rel.clamp(0, W - 1)].transpose(0, 1)  # [B, T, L]
        ok = valid[:, None] & ((rel < 0)[:, None] | ((rel < W)[:, None] & seen))
        dtype = next(self.model.parameters()).dtype
        return torch.zeros(ok.shape, dtype=dtype, device=ok.device).masked_fill_(~ok, torch.finfo(dtype).min
                                                                                 ).unsqueeze(1)

    @torch.inference_mode()
    def keep_path(self, rows: Sequence[Row], starts: Tensor, path: Tensor) -> None:
        """Commit each row's accepted tree path (node indices [B, D+1], root first, -1 after it; a node's
        slot offset is its index): the path's columns take their positions as slots (start + depth,
        consecutive — what the static backend's gather leaves) and the tree's other columns are dropped."""
        idx = torch.tensor([r.slot for r in rows], dtype=torch.long, device=self.device)
        slot, mask = self.slot[idx], self.mask[idx]
        rel = slot - starts[:, None]
        in_tree = mask & (rel >= 0)
        on_path = in_tree & (rel[..., None] == path[:, None, :]).any(-1)
        self.mask[idx] = mask & (~in_tree | on_path)
        self.slot[idx] = torch.where(on_path, self.pos[idx], slot)
