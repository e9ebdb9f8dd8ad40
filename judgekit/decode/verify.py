"""Block verification for a batch of sequences, every rule, greedy and sampled (docs/design.md §2, §8).

:func:`verify_batch` decides B blocks of k drafted tokens at once on the device. Rules are row-wise (each
position's acceptance and residual read only that position's rows), so the B x k positions are flattened
into one block of B*k rows and the rule classes of :mod:`judgekit.decode.rules` are used unchanged. Each row b may
have its own draft limit ``limit[b] <= k`` (its token budget): positions at or past it are never accepted
and the token emitted there is the bonus token, exactly as if only ``limit[b]`` tokens had been drafted.

The residual and bonus distributions are evaluated only at the one row per sequence where they are used.
In greedy mode p and q are one-hot, so every residual / bonus row is one-hot too and the emitted token is
its argmax: no vocabulary-sized random draw is made. The B x k uniforms are still drawn, because some rules
keep a fractional acceptance probability in greedy mode (CoS with lambda < 1 accepts a mismatch with
probability 1 - lambda). ``generator`` may be one generator per sequence, so that each sequence's draws do
not depend on the batch it runs in.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from judgekit.decode.rules import Rule, RuleContext, sample


def _rows(t: Tensor | None, idx: Tensor, rows: Tensor) -> Tensor | None:
    """t[b, idx[b]] for every b (t: [B, n, ...]; rows = arange(B))."""
    if t is None:
        return None
    return t[rows, idx]


Generators = torch.Generator | list[torch.Generator] | None


def uniform(shape: tuple[int, int], generator: Generators, device, limits: list[int] | None = None) -> Tensor:
    """[B, k] uniforms. With one generator per row, row b draws only its own ``limits[b]`` (the rest are
    ones: never accepted), so its stream is the one it would have alone."""
    if isinstance(generator, list):
        B, k = shape
        out = torch.ones(shape, device=device)
        for b, g in enumerate(generator):
            n = k if limits is None else min(k, limits[b])
            if n > 0:
                out[b, :n] = torch.rand(n, generator=g, device=device)
        return out
    return torch.rand(shape, generator=generator, device=device, dtype=torch.float32)


def sample_rows(dist: Tensor, generator: Generators) -> Tensor:
    """One sample per row of dist [B, V] (row b from generator[b] when there is one per row)."""
    if isinstance(generator, list):
        return torch.cat([sample(dist[b: b + 1], g) for b, g in enumerate(generator)])
    return sample(dist, generator)


def _flat(t: Tensor | None, k: int) -> Tensor | None:
    return None if t is None else t[:, :k].reshape(-1, *t.shape[2:])


def verify_batch(rule: Rule, p: Tensor, q: Tensor, x: Tensor, ctx: RuleContext,
                 limit: Tensor | list[int] | None = None,
                 greedy: bool = False, generator: Generators = None) -> tuple[Tensor, Tensor]:
    """Verify drafted tokens x [B, k] against target rows p [B, k+1, V] and draft rows q [B, k, V].

    ``limit`` [B] caps each row's block (a host list lets per-row generators draw only what they use).
    ``ctx`` holds batched rows: p_shape [B, k+1, V], q_shape [B, k, V], hidden [B, k, H] (as needed).
    Returns (n_accepted [B], next_token [B]) as device tensors; the caller syncs once to read them.
    """
    B, k = x.shape
    dev = p.device
    host_limits = limit if isinstance(limit, list) else None
    if limit is None:
        limit = torch.full((B,), k, dtype=torch.long, device=dev)
    elif host_limits is not None:
        limit = torch.tensor(host_limits, dtype=torch.long, device=dev)
    if k > 0:
        flat_ctx = RuleContext(_flat(ctx.p_shape, k), _flat(ctx.q_shape, k), _flat(ctx.hidden, k),
                               draft_hidden=_flat(ctx.draft_hidden, k))
        h = rule.acceptance(_flat(p, k), _flat(q, k), x.reshape(-1), flat_ctx).view(B, k).float()
        if greedy and rule.greedy_exact:  # h is 0 or 1: u < h for every u in [0, 1) is h == 1
            accepted = h > 0.5
        else:
            accepted = uniform((B, k), generator, dev, host_limits) < h
        accepted &= torch.arange(k, device=dev)[None] < limit[:, None]
        n = accepted.long().cumprod(1).sum(1)
    else:
        n = torch.zeros(B, dtype=torch.long, device=dev)
    # The emitted token: the residual at a real rejection, else the bonus token after the (limited) block.
    at = n.clamp(max=max(k - 1, 0))
    rows = torch.arange(B, device=dev)
    p_n = _rows(p, n, rows)
    bonus = rule.bonus(p_n, RuleContext(_rows(ctx.p_shape, n, rows), None, None))
    if k > 0:
        row_ctx = RuleContext(_rows(ctx.p_shape, at, rows), _rows(ctx.q_shape, at, rows),
                              _rows(ctx.hidden, at, rows), draft_hidden=_rows(ctx.draft_hidden, at, rows))
        residual = rule.residual(_rows(p, at, rows), _rows(q, at, rows), row_ctx)
        dist = torch.where((n < limit)[:, None], residual, bonus)
    else:
        dist = bonus
    nxt = dist.argmax(-1) if greedy else sample_rows(dist, generator)
    return n, nxt


@dataclass
class BlockResult:
    n_accepted: Tensor  # scalar long tensor (on the model's device)
    next_token: Tensor  # scalar long tensor: residual sample at the first rejection, else the bonus token


def verify_block(rule: Rule, p: Tensor, q: Tensor, x: Tensor, ctx: RuleContext,
                 generator: torch.Generator | None = None, greedy: bool = False) -> BlockResult:
    """One sequence ([k+1, V] / [k, V] / [k]) through :func:`verify_batch` (the tests' one-block entry)."""
    up = lambda t: None if t is None else t.unsqueeze(0)  # noqa: E731
    bctx = RuleContext(up(ctx.p_shape), up(ctx.q_shape), up(ctx.hidden), draft_hidden=up(ctx.draft_hidden))
    n, nxt = verify_batch(rule, p.unsqueeze(0), q.unsqueeze(0), x.unsqueeze(0), bctx, None, greedy, generator)
    return BlockResult(n[0], nxt[0])
