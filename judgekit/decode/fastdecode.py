"""Batched speculative decoding on the fast path (:mod:`judgekit.decode.fastmodel`), B sequences in lockstep.

Every step, for all active sequences at once: k draft forwards (the first reads each row's 1-2 unread
tokens, the rest one token), one target forward over ``[last token, d_1 .. d_k]``, the rule applied to the
B x k block (:func:`judgekit.decode.verify.verify_batch`), and one host sync to read the accepted lengths, emitted
tokens and drafts. Each row then advances by its own accepted length: rollback is only a per-row length
(the next write position) — the static caches are never cropped or copied. A finished row takes the next
waiting prompt (the prefills of all rows refilled in a step run as one forward per model); rows leave the
batch only when no prompt waits. A target+draft judge also gets the draft's final hidden state at each
drafted position, as the eager path gives it.

Cache invariant, per row: the target cache holds the committed sequence but its last token; the draft cache
holds it but its last ``d_unread`` (1 or 2) tokens. A batch's k is the largest per-row draft length
``min(gamma, budget left - 1)``; a row with a smaller budget has its block cut at its own limit by the
verifier, so each row's output equals its batch-1 output (greedy; tested).
"""

from __future__ import annotations

import time

import torch
from torch import Tensor

from judgekit.decode.generation import Generation, GenerationStats, StopScanner
from judgekit.decode.sampling import to_probs
from judgekit.decode.fastmodel import FastLM
from judgekit.decode.rules import RuleContext, sample
from judgekit.decode.verify import verify_batch


def _pad(rows: list[list[int]], device) -> Tensor:
    """Right-padded [B, max len] ids (padding is written past each row's length and overwritten later)."""
    width = max(1, max(len(r) for r in rows))
    out = torch.zeros(len(rows), width, dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            out[i, : len(r)] = torch.tensor(r)
    return out.to(device)


def _prefill(target: FastLM, draft: FastLM, caches, rows: list[list[int]], dev,
             cache_rows: list[int] | None = None) -> None:
    """Both caches read all but the last token of each prompt (at positions from 0), into the first rows of
    the caches, or into ``cache_rows`` (refilled rows of a running batch, prefilled together)."""
    prefix = [r[:-1] for r in rows]
    width = max(len(r) for r in prefix)
    if width == 0:
        return
    ids = _pad(prefix, dev)
    first = torch.zeros(1, dtype=torch.long, device=dev)
    for model, cache in zip((target, draft), caches):
        if cache_rows is None:
            model.forward(ids, 0, cache, width, logit_cols=first)
        else:
            model.forward(ids, torch.zeros(len(rows), dtype=torch.long, device=dev), cache, width,
                          logit_cols=first, cache_rows=torch.tensor(cache_rows, device=dev))


def generate_batch_fast(decoder, target: FastLM, draft: FastLM, prompts: list[list[int]], max_new_tokens: int,
                        stop_strings: tuple[str, ...], seeds: list[int], names: list[str],
                        batch_size: int | None = None, on_finish=None) -> list[Generation]:
    """Decode ``prompts`` with up to ``batch_size`` sequences in flight (all of them if None); a finished
    sequence's cache row is refilled with the next waiting prompt (continuous batching). ``on_finish(i, gen)``
    is called as soon as sequence i is done (callers commit results while the rest decode)."""
    pair, dev, vocab, gamma = decoder.pair, decoder.pair.device, decoder.pair.vocab_size, decoder.gamma
    sampling, rule = decoder.sampling, decoder.rule
    greedy, need_shape = sampling.greedy, decoder.need_shape
    # One generator per sequence, seeded as in batch 1: a sequence's random draws do not depend on its batch.
    generators = [torch.Generator(device=dev).manual_seed(s) for s in seeds]
    scanner = StopScanner(pair.tokenizer, tuple(stop_strings))
    B = len(prompts)
    slots = min(batch_size or B, B)
    seqs = [list(p) for p in prompts]
    n_prompt = [len(p) for p in prompts]
    max_len = max(n_prompt) + max_new_tokens + gamma + 2
    t_cache, d_cache = target.new_cache(slots, max_len), draft.new_cache(slots, max_len)
    stats = [GenerationStats(accept_hist=[0] * (gamma + 1)) for _ in range(B)]
    finish = ["length"] * B
    active = list(range(slots))  # batch row i of the caches is sequence active[i]
    waiting = iter(range(slots, B))
    d_unread = [1] * B
    results: list[Generation | None] = [None] * B

    def done(j: int) -> None:
        completion = seqs[j][n_prompt[j]:]
        stats[j].new_tokens = len(completion)
        text = pair.tokenizer.decode(completion, skip_special_tokens=True)
        results[j] = Generation(names[j], text, completion, stats[j], finish[j])
        if on_finish is not None:
            on_finish(j, results[j])
    hidden_layer = decoder.hidden_layer if rule.needs_hidden else None
    # Decoding steps may replay CUDA graphs (judgekit.decode.cudagraphs); prefills always run the plain forward.
    t_step, d_step = decoder._step or (target, draft)
    d_layer = -1 if decoder.need_draft_hidden else None  # a target+draft judge reads the draft's final state
    start = time.perf_counter()
    _prefill(target, draft, (t_cache, d_cache), [seqs[j] for j in active], dev)
    for j in active:  # the prefill is shared: each sequence pays its share
        stats[j].wall_time += (time.perf_counter() - start) / slots
    while active:
        step_start = time.perf_counter()
        A = len(active)
        lens = [len(seqs[j]) for j in active]
        limits = [min(gamma, max_new_tokens - (len(seqs[j]) - n_prompt[j]) - 1) for j in active]
        k = max(limits)
        # -- draft: k forwards; the first one reads each row's unread tokens (1 or 2)
        drafted, q_rows, q_shapes, d_states = [], [], [], []
        if k > 0:
            unread = [seqs[j][-d_unread[j]:] for j in active]
            ids = _pad(unread, dev)
            starts = [n - d_unread[j] for n, j in zip(lens, active)]
            cols = [len(u) - 1 for u in unread]
            kv_len = max(starts) + ids.shape[1]
            if A == 1:  # host positions: cache writes by slicing, no mask for one-token steps
                logits, d_h = d_step.forward(ids, starts[0], d_cache, kv_len, hidden_layer=d_layer)
                d_h = d_h[:, -1] if d_h is not None else None
                pos = starts[0] + ids.shape[1]
                kv_len = pos
            else:
                d_start = torch.tensor(starts, device=dev)
                col = torch.tensor(cols, device=dev)[:, None]
                logits, d_h = d_step.forward(ids, d_start, d_cache, kv_len, logit_cols=col, hidden_layer=d_layer)
                d_h = d_h[torch.arange(A, device=dev), col[:, 0]] if d_h is not None else None
                pos = d_start + col[:, 0] + 1  # where the next draft token is written
            for i in range(k):
                logits = logits[:, -1, :vocab]
                if d_h is not None:  # the draft's final state that proposed this token (the miner's feature)
                    d_states.append(d_h)
                if greedy:
                    tok = logits.argmax(-1)
                    if need_shape:
                        q_shapes.append(torch.softmax(logits.float(), -1))
                else:
                    probs, _ = to_probs(logits, sampling, False)
                    # Rows past their own draft limit take the argmax: their stream stays as in batch 1.
                    tok = torch.cat([sample(probs[r: r + 1], generators[j]) if i < limits[r]
                                     else probs[r: r + 1].argmax(-1) for r, j in enumerate(active)])
                    q_rows.append(probs)
                drafted.append(tok)
                if i + 1 < k:
                    kv_len += 1
                    logits, d_h = d_step.forward(tok[:, None], pos, d_cache, kv_len, hidden_layer=d_layer)
                    d_h = d_h[:, -1] if d_h is not None else None
                    pos = pos + 1
            x = torch.stack(drafted, 1)  # [A, k]
        else:
            x = torch.zeros(A, 0, dtype=torch.long, device=dev)
        # -- target: one forward over [last committed token, d_1 .. d_k]
        last = torch.tensor([seqs[j][-1] for j in active], device=dev)
        t_start = lens[0] - 1 if A == 1 else torch.tensor([n - 1 for n in lens], device=dev)
        ids = torch.cat([last[:, None], x], 1)
        logits, hidden = t_step.forward(ids, t_start, t_cache, max(lens) + k, hidden_layer=hidden_layer)
        logits = logits[..., :vocab].float()
        if greedy:
            p = torch.zeros_like(logits).scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
            q = torch.zeros(A, k, vocab, device=dev).scatter_(-1, x[..., None], 1.0)
            p_shape = torch.softmax(logits, -1) if need_shape else None
            q_shape = torch.stack(q_shapes, 1) if need_shape and k > 0 else None
        else:
            p, _ = to_probs(logits, sampling, False)
            q = torch.stack(q_rows, 1) if k > 0 else torch.zeros(A, 0, vocab, device=dev)
            p_shape = q_shape = None
        d_hidden = torch.stack(d_states, 1) if d_states else None
        if d_layer is not None and d_hidden is None:
            d_hidden = torch.zeros(A, 0, draft.config.hidden_size, dtype=draft.dtype, device=dev)
        ctx = RuleContext(p_shape, q_shape, hidden[:, 1:] if hidden is not None else None, draft_hidden=d_hidden)
        n, nxt = verify_batch(rule, p, q, x, ctx, limits, greedy, [generators[j] for j in active])
        # The one host sync of the step.
        host = torch.cat([n[:, None], nxt[:, None], x], 1).tolist()
        keep = []
        elapsed = time.perf_counter() - step_start
        for i, j in enumerate(active):
            n_acc, emitted = host[i][0], host[i][2:2 + host[i][0]] + [host[i][1]]
            st = stats[j]
            st.target_calls += 1
            st.draft_calls += k
            st.accept_hist[n_acc] += 1
            st.wall_time += elapsed / A
            base = len(seqs[j])
            d_keep = min(n_acc, k - 1) if k > 0 else -1
            d_unread[j] = n_acc + 1 - d_keep if k > 0 else d_unread[j] + 1
            seqs[j].extend(emitted)
            cut, why = decoder._finish(seqs[j], n_prompt[j], base, scanner)
            if cut is not None:
                del seqs[j][cut:]
                finish[j] = why
            elif len(seqs[j]) - n_prompt[j] >= max_new_tokens:
                del seqs[j][n_prompt[j] + max_new_tokens:]
            else:
                keep.append(i)
        refill: list[tuple[int, int]] = []
        for i in range(A):  # refill finished rows with waiting prompts, in place
            if i in keep:
                continue
            done(active[i])
            j = next(waiting, None)
            if j is not None:
                refill.append((i, j))
        if refill:  # the new prompts' prefills as one forward per model
            t0 = time.perf_counter()
            _prefill(target, draft, (t_cache, d_cache), [seqs[j] for _, j in refill], dev,
                     cache_rows=[i for i, _ in refill])
            for i, j in refill:
                stats[j].wall_time += (time.perf_counter() - t0) / len(refill)
                active[i] = j
                keep.append(i)
        if len(keep) < A:
            keep.sort()
            rows = torch.tensor(keep, dtype=torch.long, device=dev)
            t_cache.select(rows)
            d_cache.select(rows)
        active = [active[i] for i in sorted(keep)]
    return results
