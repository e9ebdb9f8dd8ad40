"""Decoding speed benchmark (`judgekit bench decode`): HF greedy, HF assisted generation and judgekit's
lossless decoder (eager and fast path).

All run in one process on the same pair, prompts and block size, after a warm-up; the outputs must be
identical (greedy lossless SD is exact), and we print tokens/s and the ratios judgekit / HF.
Pairs: a model directory pair, the pocket pair, or random-init models built from real configs and rewired
into a controlled-agreement pair (:func:`judgekit.benchmarks.synthetic.synthetic_pair`, docs/design.md §8).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch


@dataclass
class Timing:
    """Wall seconds and this process's CPU seconds (with one torch thread, CPU time is what the run cost
    even when other jobs share the cores; wall time is the figure on a GPU)."""

    name: str
    seconds: float
    new_tokens: int
    cpu_seconds: float = 0.0
    held_bytes: int | None = None  # judgekit paths: bytes held beyond the pair's parameters (KV caches aside)
    param_bytes: int = 0  # the pair's own parameter bytes, for the ratio

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def tokens_per_cpu_s(self) -> float:
        return self.new_tokens / self.cpu_seconds if self.cpu_seconds > 0 else 0.0


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device) -> tuple[float, float, object]:
    """(wall seconds, process CPU seconds, result) of ``fn()``, the device synchronised on both sides."""
    _sync(device)
    start, cpu = time.perf_counter(), time.process_time()
    out = fn()
    _sync(device)
    return time.perf_counter() - start, time.process_time() - cpu, out


DECODERS = ("HF target-only", "HF assisted", "judgekit eager", "judgekit fast", "judgekit graphs")


def run_decode_bench(pair, prompts: list[list[int]], gamma: int, max_new_tokens: int, repeats: int = 1,
                     batch_size: int = 1, compile: bool = False, only: tuple[str, ...] | None = None,
                     cuda_graphs: bool = False, tree: str | None = None):
    """Time the greedy decoders on the same prompts, ``batch_size`` prompts at a time where the decoder can
    batch (HF target-only ``generate`` with left padding, in chunks; judgekit's fast path with continuous
    batching on either backend: "judgekit eager" is the transformers backend, "judgekit fast" the static cache;
    HF assisted generation decodes one prompt at a time).
    ``only`` restricts the run to some of :data:`DECODERS` (HF target-only always runs: it is the reference
    output). ``cuda_graphs`` adds judgekit's fast path with CUDA-graph replay of its steps (GPU only);
    ``tree`` (a `--tree` spec) adds judgekit drafting that static tree ("judgekit tree"; the fast path where
    the pair has one, else the transformers backend).
    With ``repeats`` > 1 the decoders run in interleaved rounds and each Timing is the median round.
    Returns (timings, identical?)."""
    from judgekit.decode.decoder import SpeculativeDecoder
    from judgekit.decode.fastmodel import fast_unsupported
    from judgekit.decode.rules import make_rule

    dev = pair.device
    eager = SpeculativeDecoder(pair, make_rule("lossless"), block_size=gamma, fast=False)
    has_fast = fast_unsupported(pair.target) is None and fast_unsupported(pair.draft) is None
    fast = SpeculativeDecoder(pair, make_rule("lossless"), block_size=gamma, fast=True, compile=compile) \
        if has_fast else None
    # HF assisted generation with a fixed gamma and the confidence-threshold heuristic off.
    gc = pair.draft.generation_config
    gc.num_assistant_tokens = gamma
    gc.num_assistant_tokens_schedule = "constant"
    gc.assistant_confidence_threshold = 0.0
    pad = pair.tokenizer.eos_token_id if pair.tokenizer.eos_token_id is not None else 0

    def chunks(items):
        return [items[i: i + batch_size] for i in range(0, len(items), batch_size)]

    def plain(prompts):
        return [out for batch in chunks(prompts) for out in plain_batch(batch)]

    def plain_batch(batch):
        width = max(len(ids) for ids in batch)
        ids = torch.tensor([[pad] * (width - len(x)) + x for x in batch], device=dev)
        mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in batch], device=dev)
        out = pair.target.generate(ids, attention_mask=mask, max_new_tokens=max_new_tokens, min_new_tokens=0,
                                   do_sample=False, pad_token_id=pad)
        return [_strip(row[width:].tolist(), pair) for row in out]

    def assisted(batch):
        outs = []
        for x in batch:
            out = pair.target.generate(torch.tensor([x], device=dev), assistant_model=pair.draft,
                                       max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad)
            outs.append(_strip(out[0, len(x):].tolist(), pair))
        return outs

    def ours_eager(batch):  # the transformers backend, batched and refilled as the fast path is
        return [g.token_ids for g in eager.generate_batch(batch, max_new_tokens=max_new_tokens,
                                                           batch_size=batch_size)]

    def ours_fast(batch):  # continuous batching: a finished sequence's row takes the next prompt
        return [g.token_ids for g in fast.generate_batch(batch, max_new_tokens=max_new_tokens,
                                                          batch_size=batch_size)]

    methods = {"HF target-only": plain, "HF assisted": assisted, "judgekit eager": ours_eager}
    if fast is not None:
        methods["judgekit fast"] = ours_fast
    if fast is not None and cuda_graphs:
        graphed = SpeculativeDecoder(pair, make_rule("lossless"), block_size=gamma, fast=True, cuda_graphs=True)
        methods["judgekit graphs"] = lambda batch: [
            g.token_ids for g in graphed.generate_batch(batch, max_new_tokens=max_new_tokens, batch_size=batch_size)]
    treed = None
    if tree is not None:
        treed = SpeculativeDecoder(pair, make_rule("lossless"), fast=has_fast, compile=compile and has_fast,
                                   tree=tree)
        methods["judgekit tree"] = lambda batch: [
            g.token_ids for g in treed.generate_batch(batch, max_new_tokens=max_new_tokens, batch_size=batch_size)]
    if only is not None:
        methods = {k: v for k, v in methods.items() if k in only or k == "HF target-only"}
    with torch.inference_mode():
        for fn in methods.values():  # warm-up: kernels, allocator, lazy inits (and compilation)
            fn([p[:8] for p in prompts[:batch_size]])
        timings, outputs = interleaved_rounds(methods, lambda fn: timed(lambda: fn(prompts), dev), repeats)
    # What each judgekit path holds beyond the models' own parameters (weights, tables; not KV caches).
    from judgekit.decode.backends import held_bytes

    params = param_bytes(pair.target) + param_bytes(pair.draft)
    for name, dec in (("judgekit eager", eager), ("judgekit fast", fast), ("judgekit graphs", fast),
                      ("judgekit tree", treed)):
        if name in timings and dec is not None:
            lms = dec._fast or (None, None)
            timings[name].held_bytes = held_bytes(pair.target, lms[0]) + held_bytes(pair.draft, lms[1])
            timings[name].param_bytes = params
    reference = outputs["HF target-only"]
    identical = all(out == reference for out in outputs.values())
    return list(timings.values()), identical


def round_order(names: list[str], round_: int) -> list[str]:
    """The decoders' order in one round: rotated by one each round, so over the rounds every decoder runs in
    every slot and a slow spell of a shared machine falls on all of them, not on whichever ran last."""
    k = round_ % len(names)
    return names[k:] + names[:k]


def interleaved_rounds(methods: dict, run_one, repeats: int) -> tuple[dict[str, Timing], dict[str, list]]:
    """Time each method ``repeats`` times in interleaved rounds (:func:`round_order`); a method's Timing is its
    median round (wall and CPU seconds each their own median), its outputs those of every round."""
    import statistics

    names = list(methods)
    walls: dict[str, list[float]] = {n: [] for n in names}
    cpus: dict[str, list[float]] = {n: [] for n in names}
    tokens: dict[str, int] = {}
    outputs: dict[str, list] = {n: [] for n in names}
    for round_ in range(repeats):
        for name in round_order(names, round_):
            secs, cpu_secs, out = run_one(methods[name])
            walls[name].append(secs)
            cpus[name].append(cpu_secs)
            tokens[name] = sum(len(o) for o in out)
            outputs[name].extend(out)
    timings = {n: Timing(n, statistics.median(walls[n]), tokens[n], statistics.median(cpus[n])) for n in names}
    return timings, outputs


def param_bytes(model) -> int:
    """Bytes of a model's parameters, each storage counted once (tied weights share one)."""
    storages = {p.untyped_storage().data_ptr(): p.untyped_storage().nbytes() for p in model.parameters()}
    return sum(storages.values())


def _strip(ids: list[int], pair) -> list[int]:
    """A generate row up to and including its first EOS (generate pads finished rows)."""
    eos = pair.tokenizer.eos_token_id
    if eos is not None and eos in ids:
        return ids[: ids.index(eos) + 1]
    return ids


def format_report(timings: list[Timing], identical: bool, title: str, cpu_clock: bool = True) -> str:
    """The table, with ratios on CPU time (``cpu_clock``, CPU runs on a shared machine) or wall time."""
    by = {t.name: t for t in timings}
    rate = (lambda t: t.tokens_per_cpu_s) if cpu_clock else (lambda t: t.tokens_per_s)  # noqa: E731
    lines = [title, f"{'decoder':<18}{'tokens':>8}{'wall s':>9}{'cpu s':>9}{'tok/s wall':>12}{'tok/s cpu':>11}"
                    f"{'vs HF assisted':>16}{'vs target':>11}"]
    hf = by.get("HF assisted")
    for t in timings:
        vs_hf = rate(t) / max(rate(hf), 1e-9) if hf else float("nan")
        vs_t = rate(t) / max(rate(by["HF target-only"]), 1e-9)
        lines.append(f"{t.name:<18}{t.new_tokens:>8}{t.seconds:>9.2f}{t.cpu_seconds:>9.2f}{t.tokens_per_s:>12.1f}"
                     f"{t.tokens_per_cpu_s:>11.1f}{vs_hf:>15.2f}x{vs_t:>10.2f}x")
    for t in timings:
        if t.held_bytes is not None:
            share = 100.0 * t.held_bytes / max(t.param_bytes, 1)
            lines.append(f"{t.name}: holds {t.held_bytes} bytes beyond the pair's {t.param_bytes} parameter bytes "
                         f"({share:.2f} %; KV caches aside)")
    lines.append(f"outputs identical: {identical}   (ratios on {'CPU' if cpu_clock else 'wall'} time)")
    return "\n".join(lines)
