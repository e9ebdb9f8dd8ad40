"""Tree (multi-draft) decoding on either KV-rows backend: a drafter that expands a static tree shape with the
draft model and verifies it with one target forward (docs/design.md §2.1, "Decoding with a tree").

Per step, for B sequences at once: the draft reads its unread committed tokens (the root's row), then one
forward per tree level (all that level's nodes, tree-masked: each sees the committed prefix, its ancestors and
itself), and picks every node's children from its row — greedy (or a ``:topk`` tree when sampling, EAGLE's
expansion): the top-m tokens of the draft's softmax (its sampling law when sampling); sampled: m draws
without replacement (Gumbel top-m, which tolerates rows with fewer than m tokens of support:
such a draw has q = 0 and :func:`verify_tree` drops it). The target reads ``[last committed token, nodes]`` in
one tree-masked forward (node i at slot start + i, RoPE position start + depth i), :func:`verify_tree`
decides the whole batch, and one host sync reads the paths. The accepted path is committed through the
rows protocol's ``keep_path``: the static backend *gathers* its K/V entries into consecutive slots (their RoPE
positions already equal their final positions, so this is exact and cheaper than re-feeding the path), the
transformers backend keeps the path's columns and drops the rest; later slots are cropped by the next
forward's start. A judge reads the target's hidden state at each node's own column (the state after reading
that sibling, as on a chain) and, for target+draft judges, the draft's state at the node's parent.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from judgekit.decode.engine import DraftRowsLifecycle, SeqState, StepConfig, StepResult, _device
from judgekit.decode.rows import KVRows, last_cols, pad_ids
from judgekit.decode.rules import RuleContext
from judgekit.decode.sampling import SamplingConfig, to_probs
from judgekit.decode.tree import TreeSpec
from judgekit.decode.tree_verify import verify_tree


def draw_without_replacement(probs: Tensor, m: int, generators: Sequence[torch.Generator | None]) -> Tensor:
    """[B, n, m] draws without replacement from each row of probs [B, n, V] (Gumbel top-m; row b's noise
    from generators[b], so a sequence's draws do not depend on its batch; a None generator takes the top-m
    without drawing: rows past their own limit keep their random stream that of batch 1)."""
    B, n, V = probs.shape
    zeros = torch.zeros(n, V, device=probs.device)
    u = torch.stack([zeros if g is None else -torch.log(-torch.log(
        torch.rand(n, V, generator=g, device=probs.device).clamp_min(1e-20))) for g in generators])
    gumbel = u
    return (probs.log() + gumbel).topk(m, -1).indices


class TreeDrafter(DraftRowsLifecycle):
    """Drafts a static tree per step with the draft model on its own static rows and verifies it itself
    (:func:`judgekit.decode.engine.speculative_step` hands it the step). ``need_hidden``: keep the draft's
    final hidden state [H_d] at every node (a target+draft judge's features)."""

    def __init__(self, rows: KVRows, spec: TreeSpec, sampling: SamplingConfig, need_shape: bool = False,
                 need_hidden: bool = False, hidden_size: int = 0):
        self.rows, self.spec, self.sampling, self.need_shape = rows, spec, sampling, need_shape
        self.need_hidden, self.hidden_size = need_hidden, hidden_size
        # siblings are the draft's top-m (greedy, or a ``:topk`` tree) or draws without replacement
        self.topk = sampling.greedy or spec.siblings == "topk"
        self.tree = spec.tensors(rows.device)
        dev = rows.device
        depth = self.tree.depth
        # each level's nodes are a contiguous index range (parents precede children)
        self.levels = [(int((depth < d).sum()), int((depth <= d).sum())) for d in range(spec.depth + 1)]
        self.slot_of = torch.arange(self.tree.n, device=dev)

    def _children(self, probs: Tensor, shape: Tensor, parents: tuple[int, int], seqs, level: int
                  ) -> tuple[Tensor, Tensor]:
        """The children of nodes parents[0]..parents[1]-1 from their rows [B, n, V]: (node indices, tokens)."""
        kids = self.tree.children[parents[0]: parents[1]]  # [n, W]
        valid = kids >= 0
        W = kids.shape[1]
        if self.topk:
            picks = shape.topk(W, -1).indices  # the draft's most likely tokens, in rank order
        else:
            picks = draw_without_replacement(probs, W, [s.generator if level <= s.limit else None for s in seqs])
        return kids[valid], picks[:, valid]

    def propose_tree(self, seqs: Sequence[SeqState], depth: int
                     ) -> tuple[Tensor, Tensor | None, Tensor | None, Tensor | None]:
        """Node tokens [B, N+1] (the root = the last committed token), draft rows q [B, N+1, V] (sampled
        siblings only: the law each node's children were drawn from), draft shapes (if a rule reads them)
        and the draft's hidden state at each node [B, N+1, H_d] (if ``need_hidden``; zero at nodes it never
        read). Only the levels 1..``depth`` are drafted (``depth`` forwards): deeper nodes keep token 0 and
        are never accepted (every row's limit is below them)."""
        dev, B, V, tr = _device(seqs), len(seqs), self.rows.vocab, self.tree
        rows = [s.draft for s in seqs]
        tokens = torch.zeros(B, tr.n, dtype=torch.long, device=dev)
        tokens[:, 0] = torch.tensor([s.ids[-1] for s in seqs], device=dev)
        keep_q = not self.sampling.greedy
        q = torch.zeros(B, tr.n, V, device=dev) if keep_q else None
        q_shape = torch.zeros(B, tr.n, V, device=dev) if self.need_shape else None
        hidden = torch.zeros(B, tr.n, self.hidden_size, device=dev) if self.need_hidden else None
        layers = (-1,) if self.need_hidden else ()
        if depth == 0:
            return tokens, q, q_shape, hidden
        ids, lengths = pad_ids([s.ids[s.d_len:] for s in seqs], dev)
        logits, states = self.rows.forward(rows, ids, [s.d_len for s in seqs], lengths,
                                           logit_cols=last_cols(lengths, dev), hidden_layers=layers)
        if hidden is not None:  # the root's state: each row's last real column
            hidden[:, 0] = states[0][torch.arange(B, device=dev), torch.tensor(lengths, device=dev) - 1]
        root = torch.tensor([len(s.ids) - 1 for s in seqs])
        for d in range(1, depth + 1):
            lo, hi = self.levels[d - 1]
            probs, shape = to_probs(logits, self.sampling, self.need_shape)
            if shape is None:
                shape = torch.softmax(logits.float(), -1) if self.sampling.greedy else probs
            if keep_q:
                q[:, lo:hi] = probs
            if q_shape is not None:
                q_shape[:, lo:hi] = shape
            nodes, toks = self._children(probs, shape, (lo, hi), seqs, d)
            tokens[:, nodes] = toks
            if d < depth:  # the last drafted level is never read by the draft
                lo, hi = self.levels[d]
                logits, states = self.rows.forward(rows, tokens[:, lo:hi], root.tolist(), hidden_layers=layers,
                                                   tree=(self.slot_of[lo:hi], tr.depth[lo:hi], tr.mask[lo:hi, :hi]))
                if hidden is not None:
                    hidden[:, lo:hi] = states[0]
        return tokens, q, q_shape, hidden

    def step(self, cfg: StepConfig, target, seqs: Sequence[SeqState], k: int) -> list[StepResult]:
        """One tree step (``k``, the driver's block, is the largest row limit; each row's own ``limit`` caps
        its accepted depth)."""
        dev, tr = _device(seqs), self.tree
        depth = min(k, self.spec.depth)
        tokens, q, q_shape, draft_hidden = self.propose_tree(seqs, depth)
        starts = [len(s.ids) - 1 for s in seqs]
        layers = () if cfg.hidden_layer is None else (cfg.hidden_layer,)
        logits, states = target.forward([s.target for s in seqs], tokens, starts, hidden_layers=layers,
                                        tree=(self.slot_of, tr.depth, tr.mask))
        p, p_shape = to_probs(logits, cfg.sampling, cfg.need_shape)
        hidden = states[0] if layers else None  # the target after reading each node: that sibling's features
        res = verify_tree(cfg.rule, tr, tokens, p, RuleContext(p_shape, q_shape, hidden, draft_hidden=draft_hidden),
                          q=q,
                          proposal="topk" if self.topk else "sample", limit=[s.limit for s in seqs],
                          greedy=cfg.sampling.greedy, generator=[s.generator for s in seqs])
        start = torch.tensor(starts, dtype=torch.long, device=dev)
        target.keep_path([s.target for s in seqs], start, res.path)
        self.rows.keep_path([s.draft for s in seqs], start, res.path)
        host = torch.cat([res.length[:, None], res.next_token[:, None], res.tokens], 1).tolist()  # the one sync
        out = []
        for s, row in zip(seqs, host):
            n_acc, base = row[0], len(s.ids)
            emitted = row[2: 2 + n_acc] + [row[1]]
            s.ids.extend(emitted)
            s.t_len = base + n_acc
            if depth > 0:  # the draft read the nodes above the last drafted level
                s.d_len = base + min(n_acc, depth - 1)
            out.append(StepResult(n_acc, emitted))
        return out
