"""Verification of a drafted tree for a batch of sequences, and its per-position closed forms (docs/design.md §2.1).

**One rule for every node.** At a tree node the target row p verifies the node's m children c_1..c_m (in
rank order) by *recursive rejection over siblings*, built from the chain rule's own pieces of
:mod:`judgekit.decode.rules`: with t_1 = p and d_i the law the i-th sibling was drawn from,

    accept c_i with probability h_i = rule.acceptance(t_i, d_i, c_i);  else t_{i+1} = rule.residual(t_i, d_i)

and the first accepted sibling wins; if all are rejected the token emitted at the node is drawn from t_{m+1}.
Two sibling laws d_i (``proposal``):

* ``"topk"`` — the siblings are the draft's top-m tokens, a deterministic choice, so d_i is the point mass on
  c_i. For lossless verification this is EAGLE's recursive rejection (accept c_i with t_i(c_i), then drop c_i
  from t and renormalise), the scheme the paper's Appendix G.2-G.3 analyses; it emits p exactly because the
  candidates do not depend on the target's coins (G.3: c_i is accepted with probability p(c_i)).
* ``"sample"`` — the siblings are m draws from the draft q *without replacement*, so d_i = q with c_1..c_{i-1}
  removed and renormalised. This is the without-replacement correction of Recursive Speculative Decoding
  (Jeon et al., 2024, "sampling without replacement"); with the lossless pieces (h = min(1, t/d), residual
  norm((t - d)+)) it emits p exactly: given that sibling i is reached, c_i ~ d_i, and the standard rejection
  argument holds at every step because t_{i+1} does not depend on which token c_i was rejected. (Plain SpecTr /
  SpecInfer recursive rejection with d_i = q is exact only for siblings drawn *with* replacement.)

What the pieces give per rule:

* ``lossless`` — p exactly; ``minp`` / ``eta`` (truncation sampling + SD, the matched baselines) — p_A
  exactly: the first step's target is the truncated p_A, every residual stays inside A.
* ``speccascade`` / ``typical`` — h = 1[c in A], so the first sibling in A is accepted; else the chain
  rule's residual (q restricted to A, p_A when the sibling law has no mass on A). With top-k siblings the
  emitted token is the *deterministic* first top-k token in A (KL_EAGLE of Theorem 1); with sampled
  siblings it is q / Z_A(q) on A, the chain's law (KL_SD), whatever m.
* ``judge`` — the chain's h (1 where d <= t, else t/d + (1 - t/d)·j(c)): in greedy mode the first sibling
  that matches the target's argmax or that the judge calls unimportant; its features are the target hidden
  state at that sibling's own verify position (and the draft hidden state at its parent).
* greedy decoding — p, q one-hot as for chains: every rule accepts the sibling equal to the target's argmax
  (or, for the judge, a kept mismatch before it), and the emitted token is the argmax of its distribution.

The truncation sets are fixed by each node's own target row (``ctx.p_shape``, else p), so they do not move
as t is updated. Decisions are made at every internal node at once (independent uniforms, one per node),
then the accepted path is followed from the root, one gather per depth; the residual is drawn only at the
node where the path stops (the bonus distribution at a leaf). Everything stays on the device; the caller
syncs once to read :class:`TreeResult`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from judgekit.decode.rules import (
    Judge,
    Rule,
    RuleContext,
    _MatchedTruncation,
    _normalise,
    _TruncationVerify,
)
from judgekit.decode.tree import TreeTensors
from judgekit.decode.verify import Generators, sample_rows, uniform
from judgekit.errors import JudgekitError

TREE_RULES = ("lossless", "minp", "eta", "speccascade", "typical", "judge")
PROPOSALS = ("topk", "sample")


def check_tree_rule(rule: Rule) -> None:
    """Only the rules whose tree form is defined (and tested) here may verify trees."""
    if rule.name not in TREE_RULES:
        raise JudgekitError(f"rule {rule.name!r} has no tree form; tree verification supports "
                            f"{', '.join(TREE_RULES)}")


def _check_proposal(proposal: str) -> None:
    if proposal not in PROPOSALS:
        raise JudgekitError(f"unknown sibling proposal {proposal!r}; use {' or '.join(PROPOSALS)}")


def without(d: Tensor, x: Tensor) -> Tensor:
    """d [n, V] with token x [n] removed and renormalised: the law of the next draw without replacement."""
    rest = d.scatter(1, x.unsqueeze(1), 0.0)
    return _normalise(rest, d)


def _point(x: Tensor, vocab: int, dtype) -> Tensor:
    """Point masses at tokens x [n]: [n, V] in the given dtype (one_hot would build an int64 block first)."""
    return torch.zeros(x.shape[0], vocab, dtype=dtype, device=x.device).scatter_(1, x.unsqueeze(1), 1.0)


@dataclass
class TreeResult:
    path: Tensor  # [B, D+1] node indices root..terminal node, -1 after it
    length: Tensor  # [B] accepted drafted nodes (tokens taken from the tree)
    tokens: Tensor  # [B, D] the accepted tokens in order, -1 after them
    next_token: Tensor  # [B] the token emitted after the path (residual at its last node, or bonus at a leaf)
    node: Tensor  # [B] the node where the path stops


def _rows(t: Tensor | None, idx: Tensor) -> Tensor | None:
    """t[:, idx] flattened to [B * len(idx), ...]."""
    return None if t is None else t[:, idx].reshape(-1, *t.shape[2:])


@dataclass
class _Decisions:
    """The sibling recursion's outcome at every internal node of every row, flattened to [B * nI] rows."""

    chosen: Tensor  # [B, nI] rank of the accepted child, W if none
    tried: Tensor  # [B, nI] the node had a sibling to verify (else its token is the bonus)
    t: Tensor  # [B * nI, V] the target before the node's last sibling (after the rejected ones before it)
    d: Tensor | None  # sampled siblings: [B * nI, V] the last sibling's law; top-k: None (a point mass)
    last: Tensor  # [B * nI] token of the node's last sibling
    last_child: Tensor  # [nI] node index of each internal node's last child
    pending: Tensor  # [B * nI] the last sibling was verified and rejected: one more residual step is due
    shape: Tensor | None  # [B * nI, V] the node's own target shape (its truncation sets), if the rule reads one


def _decide(rule: Rule, tree: TreeTensors, tokens: Tensor, p: Tensor, q: Tensor | None, ctx: RuleContext,
            proposal: str, u: Tensor, active: Tensor) -> _Decisions:
    """The recursion over siblings, rank by rank; rank i touches only the nodes that have an i-th child
    and the residual after a node's *last* sibling is left to :func:`_final`, which takes it only where a
    path stops (the recursion's vocabulary-sized work is then one row per rejected non-last sibling)."""
    B, _, V = p.shape
    dev = p.device
    internal = tree.internal
    n_int, width = int(internal.shape[0]), tree.width
    kids = tree.children[internal]  # [nI, W]
    t = _rows(p, internal)
    # sets and shapes come from the node's own target row, never from the updated t (rules that read no
    # shape get none: lossless and the judge)
    if ctx.p_shape is not None:
        shape = _rows(ctx.p_shape, internal)
    else:
        shape = t.clone() if rule.needs_shape else None
    q_shape = _rows(ctx.q_shape, internal)
    draft_hidden = _rows(ctx.draft_hidden, internal)
    d_state = _rows(q, internal).to(t.dtype) if proposal == "sample" else None  # a copy, in p's dtype
    chosen = torch.full((B * n_int,), width, dtype=torch.long, device=dev)
    tried = torch.zeros(B * n_int, dtype=torch.bool, device=dev)
    pending = torch.zeros(B * n_int, dtype=torch.bool, device=dev)
    last = torch.zeros(B * n_int, dtype=torch.long, device=dev)
    base = (torch.arange(B, device=dev) * n_int).unsqueeze(1)
    pick = lambda t_, r: None if t_ is None else t_[r]  # noqa: E731
    for i, (local, pos_last, pos_go) in enumerate(tree.ranks):  # siblings are sequential by nature; each
        # rank covers, in all rows at once, the internal nodes that have an i-th child (static: no host sync)
        rows = (base + local.unsqueeze(0)).reshape(-1)  # their flattened rows, all B sequences
        within = lambda pos: (torch.arange(B, device=dev).unsqueeze(1) * len(local) + pos).reshape(-1)  # noqa: E731
        c = kids[local, i]
        x = tokens[:, c].reshape(-1)
        has = active[:, c].reshape(-1)
        if proposal == "sample":
            d = d_state[rows]
            has &= d.gather(1, x.unsqueeze(1)).squeeze(1) > 0  # a draw past q's support: not a real sibling
        else:
            d = _point(x, V, t.dtype)
        node_ctx = RuleContext(pick(shape, rows), pick(q_shape, rows), _rows(ctx.hidden, c),
                               draft_hidden=pick(draft_hidden, rows))
        t_i = t[rows]
        h = rule.acceptance(t_i, d, x, node_ctx).float()
        open_ = has & (chosen[rows] == width)
        accepted = open_ & (u[:, c].reshape(-1) < h)
        chosen[rows] = torch.where(accepted, i, chosen[rows])
        rejected = open_ & ~accepted
        tried[rows] |= has
        fin = within(pos_last)  # nodes whose last sibling this is: their residual waits for _final
        pending[rows[fin]] = rejected[fin]
        last[rows[fin]] = x[fin]
        if len(pos_go):  # nodes with a further sibling: take the residual step now
            go = within(pos_go)
            sub = RuleContext(pick(node_ctx.p_shape, go), pick(node_ctx.q_shape, go), pick(node_ctx.hidden, go),
                              draft_hidden=pick(node_ctx.draft_hidden, go))
            res = rule.residual(t_i[go], d[go], sub)
            t[rows[go]] = torch.where(rejected[go].unsqueeze(1), res, t_i[go])
            if proposal == "sample":
                d_state[rows[go]] = torch.where(has[go].unsqueeze(1), without(d[go], x[go]), d[go])
    n_kids = (kids >= 0).sum(1)
    last_child = kids[torch.arange(n_int, device=dev), (n_kids - 1).clamp(min=0)]
    return _Decisions(chosen.view(B, n_int), tried.view(B, n_int), t, d_state, last, last_child, pending, shape)


def _final(rule: Rule, dec: _Decisions, tree: TreeTensors, ctx: RuleContext, b: Tensor, s: Tensor) -> Tensor:
    """The residual distribution after every sibling of internal node s[k] (a position in
    ``tree.internal``) of row b[k] was rejected: one more residual step where the last sibling was verified."""
    n_int = int(dec.chosen.shape[1])
    r = b * n_int + s
    t = dec.t[r]
    d = dec.d[r] if dec.d is not None else _point(dec.last[r], t.shape[-1], t.dtype)
    node, child = tree.internal[s], dec.last_child[s]
    at = lambda x, n: None if x is None else x[b, n]  # noqa: E731
    node_ctx = RuleContext(None if dec.shape is None else dec.shape[r], at(ctx.q_shape, node), at(ctx.hidden, child),
                           draft_hidden=at(ctx.draft_hidden, node))
    return torch.where(dec.pending[r].unsqueeze(1), rule.residual(t, d, node_ctx), t)


def verify_tree(rule: Rule, tree: TreeTensors, tokens: Tensor, p: Tensor, ctx: RuleContext,
                q: Tensor | None = None, proposal: str = "topk", limit: Tensor | list[int] | None = None,
                greedy: bool = False, generator: Generators = None) -> TreeResult:
    """Verify B drafted trees of one shape.

    tokens [B, N+1]: the token at every node (index 0, the root, is the committed token and is not read);
    p [B, N+1, V]: the target's row at every node (what follows it); q [B, N+1, V]: the draft's row at every
    node (the law its children were drawn from; needed only for ``proposal="sample"``). ``ctx`` holds batched
    rows over the same nodes: p_shape, q_shape, hidden [B, N+1, H] (the target after reading each node's
    token: the judge's features for that node), draft_hidden [B, N+1, H_d] (the draft at each node).
    ``limit`` [B] caps the accepted depth of each row (its token budget): deeper nodes are never accepted and
    the token after the capped path is the bonus token. ``generator`` may be one generator per row.
    """
    check_tree_rule(rule)
    _check_proposal(proposal)
    if proposal == "sample" and q is None:
        raise JudgekitError("sampled siblings need the draft rows q")
    B, n, _ = p.shape
    if n != tree.n or tokens.shape != (B, n):
        raise JudgekitError(f"tree of {tree.n} nodes given rows for {n} nodes and tokens {tuple(tokens.shape)}")
    dev = p.device
    tr = tree if tree.parent.device == dev else tree.spec.tensors(dev)
    if limit is None:
        active = torch.ones(B, n, dtype=torch.bool, device=dev)
    else:
        lim = torch.as_tensor(limit, dtype=torch.long, device=dev)
        active = tr.depth.unsqueeze(0) <= lim.unsqueeze(1)
    u = uniform((B, n), generator, dev)
    dec = _decide(rule, tr, tokens, p, q, ctx, proposal, u, active)
    chosen = dec.chosen

    # follow the accepted children from the root, one gather per depth
    slot = torch.full((n,), -1, dtype=torch.long, device=dev)
    slot[tr.internal] = torch.arange(int(tr.internal.shape[0]), device=dev)
    rows = torch.arange(B, device=dev)
    node = torch.zeros(B, dtype=torch.long, device=dev)
    depth = tr.spec.depth
    path = torch.full((B, depth + 1), -1, dtype=torch.long, device=dev)
    path[:, 0] = 0
    width = tr.width
    for level in range(1, depth + 1):
        s = slot[node]
        r = torch.where(s >= 0, chosen[rows, s.clamp(min=0)], width)
        child = torch.where(r < width, tr.children[node, r.clamp(max=width - 1)], -1)
        ok = child >= 0
        node = torch.where(ok, child, node)
        path[:, level] = torch.where(ok, child, -1)
    length = (path[:, 1:] >= 0).sum(1)
    accepted_tokens = torch.where(path[:, 1:] >= 0, tokens.gather(1, path[:, 1:].clamp(min=0)), -1)

    # the emitted token: the final residual where the path stops at a node with siblings, else the bonus
    s = slot[node]
    verified = (s >= 0) & dec.tried[rows, s.clamp(min=0)]
    p_shape = None if ctx.p_shape is None else ctx.p_shape[rows, node]
    bonus = rule.bonus(p[rows, node], RuleContext(p_shape, None, None))
    dist = torch.where(verified.unsqueeze(1), _final(rule, dec, tr, ctx, rows, s.clamp(min=0)), bonus)
    nxt = dist.argmax(-1) if greedy else sample_rows(dist, generator)
    return TreeResult(path, length, accepted_tokens, nxt, node)


# ----------------------------------------------------------------------------------------------------------
# Closed forms at one position (the paper's Appendix G.3), like the chain rules' ``induced``


@dataclass
class TreeLaw:
    law: Tensor  # [n, V] the law of the token emitted at the position (accepted sibling or residual)
    acceptance: Tensor | None  # [n] a(C) = P(some sibling accepted); None where no closed form is known
    children: Tensor | None  # [n, m] the candidates (top-k siblings), None for sampled siblings


def candidates(q: Tensor, ctx: RuleContext, width: int) -> Tensor:
    """The top-``width`` draft tokens per row, most likely first (ranked by the draft's shape in greedy mode)."""
    _, q_shape = ctx.shapes(q, q)
    if not 1 <= width <= q.shape[-1]:
        raise JudgekitError(f"tree width must be in [1, {q.shape[-1]}], got {width}")
    return q_shape.topk(width, dim=-1).indices


def tree_induced(rule: Rule, p: Tensor, q: Tensor, ctx: RuleContext, width: int,
                 proposal: str = "topk") -> TreeLaw:
    """The law of the token emitted at a node with ``width`` siblings, written from G.3 (not from the
    recursion above, so that the tests can hold one against the other).

    Top-k siblings C (deterministic): truncation sampling + SD accepts c_i with probability p_A(c_i) — reach
    c_i with 1 - sum_{l<i} p_A(c_l), then accept with p_A(c_i) / (1 - sum_{l<i} p_A(c_l)) — so
    a = p_A(C) and the law is p_A (lossless: A = V). SpecCascade / typical accept the first c in C ∩ A:
    a = 1[C ∩ A ≠ ∅], law = the point mass there, else p_A. The judge: reach c_i with prod_{l<i}(1 - h_l),
    h_i = t_i + (1 - t_i) j(c_i), t_i = p(c_i) / (1 - sum_{l<i} p(c_l)); the rest of p off C on rejection.
    Sampled siblings: lossless p, baseline p_A, SpecCascade / typical the chain law q / Z_A(q) (the first
    A-token of a draw without replacement from q is q_A-distributed whatever m); no closed-form acceptance.
    """
    check_tree_rule(rule)
    _check_proposal(proposal)
    vocab = p.shape[-1]
    if proposal == "sample":
        if isinstance(rule, Judge):
            raise JudgekitError("the judge with sampled siblings has no closed form here")
        if isinstance(rule, _MatchedTruncation):
            return TreeLaw(rule._truncated(p, ctx), None, None)
        if isinstance(rule, _TruncationVerify):
            return TreeLaw(rule.induced(p, q, ctx), None, None)
        return TreeLaw(p, None, None)
    kids = candidates(q, ctx, width)
    if isinstance(rule, _TruncationVerify):
        in_a = rule._mask(p, ctx).gather(1, kids)
        hit = in_a.any(1)
        first = kids.gather(1, in_a.float().argmax(1, keepdim=True)).squeeze(1)  # argmax: first True
        law = torch.where(hit.unsqueeze(1), _point(first, vocab, p.dtype), rule._truncated(p, ctx))
        return TreeLaw(law, hit.to(p.dtype), kids)
    if isinstance(rule, _MatchedTruncation) or rule.name == "lossless":
        target = rule._truncated(p, ctx) if isinstance(rule, _MatchedTruncation) else p
        return TreeLaw(target, target.gather(1, kids).sum(1), kids)
    # the judge: G.3's telescoping product with a kept-mismatch chance at every sibling
    p_c = p.gather(1, kids)
    before = 1 - (p_c.cumsum(1) - p_c)  # 1 - sum_{l<i} p(c_l)
    t_c = torch.where(before > 1e-12, p_c / before.clamp_min(1e-12), torch.zeros_like(p_c)).clamp(max=1.0)
    keep = ctx.judge_vocab.gather(1, kids).to(p.dtype)
    h = t_c + (1 - t_c) * keep
    survive = torch.cumprod(torch.cat([torch.ones_like(h[:, :1]), 1 - h], 1), 1)  # [n, m+1]
    law = torch.zeros_like(p).scatter_add(1, kids, survive[:, :-1] * h)
    rest = _normalise(p.scatter(1, kids, 0.0), p)
    law = law + survive[:, -1:] * rest
    return TreeLaw(law, 1 - survive[:, -1], kids)
