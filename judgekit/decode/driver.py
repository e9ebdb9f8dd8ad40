"""Continuous batching around :func:`judgekit.decode.engine.speculative_step`: one driver for every backend.

Up to ``batch_size`` sequences are in flight; each step's k is the largest per-row draft limit
``min(gamma, budget left - 1)`` and a row with a smaller budget has its block cut at its own limit by the
verifier, so each sequence's output equals its batch-1 output (greedy; tested). A finished sequence (EOS,
stop string, budget) gives its rows back and the next waiting prompt takes them; the prefills of all
sequences admitted in a step run as one forward per model. Each Generation's stats carry its share of the
batch's wall time, so merged stats give the aggregate tokens/s.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import torch

from judgekit.decode.engine import Drafter, SeqState, StepConfig, prefill, speculative_step
from judgekit.decode.generation import Generation, GenerationStats, StopScanner, text_decoder
from judgekit.decode.rows import KVRows


def finish_cut(ids: list[int], n_prompt: int, base: int, eos: set[int], scanner: StopScanner
               ) -> tuple[int | None, str]:
    """Where to cut ``ids`` after a step that appended tokens from ``base`` on (EOS or stop string), and why."""
    completion = ids[n_prompt:]
    first_new = base - n_prompt
    for j in range(first_new, len(completion)):
        if completion[j] in eos:
            hit = scanner.first_hit(completion[: j + 1], first_new)
            return (n_prompt + hit + 1, "stop") if hit is not None else (n_prompt + j + 1, "eos")
    hit = scanner.first_hit(completion, first_new)
    if hit is not None:
        return n_prompt + hit + 1, "stop"
    return None, "length"


def decode_batch(cfg: StepConfig, target: KVRows, drafter: Drafter, prompts: Sequence[Sequence[int]], *,
                 gamma: int, max_new_tokens: int, tokenizer, eos: set[int], stop_strings: tuple[str, ...] = (),
                 seeds: Sequence[int], names: Sequence[str], batch_size: int | None = None, device=None,
                 on_finish: Callable[[int, Generation], None] | None = None) -> list[Generation]:
    """Decode ``prompts`` (non-empty id lists) with up to ``batch_size`` in flight (all if None);
    ``on_finish(i, gen)`` runs as soon as prompt i is done (completion order)."""
    N = len(prompts)
    slots = min(batch_size or N, N)
    scanner = StopScanner(tokenizer, tuple(stop_strings))
    decode = text_decoder(tokenizer)
    # One generator per sequence, seeded as in batch 1: a sequence's draws do not depend on its batch.
    seqs = [SeqState(list(p), torch.Generator(device=device).manual_seed(s)) for p, s in zip(prompts, seeds)]
    n_prompt = [len(p) for p in prompts]
    stats = [GenerationStats(accept_hist=[0] * (gamma + 1)) for _ in range(N)]
    finish = ["length"] * N
    results: list[Generation | None] = [None] * N
    waiting = iter(range(N))

    def admit(count: int) -> list[int]:
        new = [j for j in (next(waiting, None) for _ in range(count)) if j is not None]
        if not new:
            return []
        t0 = time.perf_counter()
        batch = [seqs[j] for j in new]
        for s in batch:
            s.target, s.t_len = target.acquire(), len(s.ids) - 1
        drafter.admit(batch)
        prefill(target, lambda s: s.target, batch)
        for j in new:  # the prefill is shared: each sequence pays its share
            stats[j].wall_time += (time.perf_counter() - t0) / len(new)
        return new

    def done(j: int) -> None:
        s = seqs[j]
        target.release(s.target)
        drafter.retire(s)
        completion = s.ids[n_prompt[j]:]
        stats[j].new_tokens = len(completion)
        text = decode(completion)
        results[j] = Generation(names[j], text, completion, stats[j], finish[j])
        if on_finish is not None:
            on_finish(j, results[j])

    active = admit(slots)
    while active:
        t0 = time.perf_counter()
        batch = [seqs[j] for j in active]
        for j, s in zip(active, batch):
            s.limit = min(gamma, max_new_tokens - (len(s.ids) - n_prompt[j]) - 1)
        k = max(s.limit for s in batch)
        bases = [len(s.ids) for s in batch]
        steps = speculative_step(cfg, target, drafter, batch, k)
        elapsed = time.perf_counter() - t0
        still = []
        for j, s, base, res in zip(active, batch, bases, steps):
            st = stats[j]
            st.target_calls += 1
            st.draft_calls += k
            st.accept_hist[res.n_accepted] += 1
            st.wall_time += elapsed / len(active)
            cut, why = finish_cut(s.ids, n_prompt[j], base, eos, scanner)
            if cut is not None:
                del s.ids[cut:]
                finish[j] = why
                done(j)
            elif len(s.ids) - n_prompt[j] >= max_new_tokens:
                del s.ids[n_prompt[j] + max_new_tokens:]
                done(j)
            else:
                still.append(j)
        still += admit(len(active) - len(still))
        # Slot order: a forward over every live row in order runs on the backend's cache as it is.
        active = sorted(still, key=lambda j: seqs[j].target.slot)
    return results
