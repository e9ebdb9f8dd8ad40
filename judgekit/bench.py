"""Decoding speed benchmark: plain greedy, HF assisted generation and judgekit's lossless decoder.

All three run in one process on the same pair, prompts and block size, after a warm-up; the outputs must
be identical (greedy lossless SD is exact), and we print tokens/s and the ratio judgekit / HF.
Pairs: a model directory pair, the pocket pair, or random-init models built from real configs and
rewired into a controlled-agreement pair (DESIGN.md §8; no download).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from judgekit.errors import JudgekitError

# Real configs written inline (no download). Embeddings are untied so the controlled construction can set
# the LM head independently; this adds the head's parameters to the 0.5B but does not change its shape.
QWEN25_CONFIGS = {
    "qwen2.5-0.5b": dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
                         rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=False),
    "qwen2.5-7b": dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                       num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=32768,
                       rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=False),
    # CPU-sized stand-ins with the same architecture and vocabulary shape.
    "cpu-target": dict(vocab_size=32000, hidden_size=512, intermediate_size=1408, num_hidden_layers=8,
                       num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=4096,
                       tie_word_embeddings=False),
    "cpu-draft": dict(vocab_size=32000, hidden_size=128, intermediate_size=352, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                      tie_word_embeddings=False),
}


@dataclass
class Timing:
    name: str
    seconds: float
    new_tokens: int

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0


def build_config_model(name: str, dtype: torch.dtype, device: torch.device, seed: int = 0):
    from transformers import AutoModelForCausalLM, Qwen2Config

    if name not in QWEN25_CONFIGS:
        raise JudgekitError(f"unknown synthetic config {name!r}; choose from {', '.join(QWEN25_CONFIGS)}")
    torch.manual_seed(seed)
    config = Qwen2Config(**QWEN25_CONFIGS[name], eos_token_id=None, bos_token_id=None)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model.eval()


class _NoTokenizer:
    """Synthetic pairs decode ids only: no text, no EOS."""

    eos_token_id = None

    def decode(self, ids, **_kwargs) -> str:
        return " ".join(map(str, ids))


def synthetic_pair(target: str, draft: str, agreement: float, device: str = "auto", dtype: str = "auto"):
    from judgekit.models import ModelPair, resolve_device, resolve_dtype
    from judgekit.synthetic import make_controlled_pair

    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    tm = build_config_model(target, dt, dev, seed=0)
    dm = build_config_model(draft, dt, dev, seed=1)
    make_controlled_pair(tm, dm, agreement)
    vocab = min(tm.config.vocab_size, dm.config.vocab_size)
    return ModelPair(tm, dm, _NoTokenizer(), target, draft, vocab, dev)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time(fn, device) -> tuple[float, object]:
    _sync(device)
    start = time.perf_counter()
    out = fn()
    _sync(device)
    return time.perf_counter() - start, out


def run_decode_bench(pair, prompts: list[list[int]], gamma: int, max_new_tokens: int, repeats: int = 1):
    """Time the three greedy decoders on the same prompts; returns (timings, identical?)."""
    from judgekit.decoding import SpeculativeDecoder
    from judgekit.rules import make_rule

    dev = pair.device
    decoder = SpeculativeDecoder(pair, make_rule("lossless"), block_size=gamma)
    # HF assisted generation with a fixed gamma and the confidence-threshold heuristic off.
    gc = pair.draft.generation_config
    gc.num_assistant_tokens = gamma
    gc.num_assistant_tokens_schedule = "constant"
    gc.assistant_confidence_threshold = 0.0
    pad = pair.tokenizer.eos_token_id if pair.tokenizer.eos_token_id is not None else 0

    def plain(ids):
        out = pair.target.generate(torch.tensor([ids], device=dev), max_new_tokens=max_new_tokens,
                                   min_new_tokens=0, do_sample=False, pad_token_id=pad)
        return out[0, len(ids):].tolist()

    def assisted(ids):
        out = pair.target.generate(torch.tensor([ids], device=dev), assistant_model=pair.draft,
                                   max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad)
        return out[0, len(ids):].tolist()

    def ours(ids):
        return decoder.generate_ids(ids, max_new_tokens=max_new_tokens).token_ids

    methods = {"target greedy": plain, "HF assisted": assisted, "judgekit lossless": ours}
    with torch.inference_mode():
        for fn in methods.values():  # warm-up: kernels, allocator, lazy inits
            fn(prompts[0][:8])
        timings, outputs = {}, {}
        for name, fn in methods.items():
            total, toks, outs = 0.0, 0, []
            for _ in range(repeats):
                for ids in prompts:
                    secs, out = _time(lambda: fn(ids), dev)
                    total += secs
                    toks += len(out)
                    outs.append(out)
            timings[name] = Timing(name, total, toks)
            outputs[name] = outs
    identical = outputs["target greedy"] == outputs["HF assisted"] == outputs["judgekit lossless"]
    return list(timings.values()), identical


def format_report(timings: list[Timing], identical: bool, title: str) -> str:
    by = {t.name: t for t in timings}
    lines = [title, f"{'decoder':<20}{'tokens':>8}{'seconds':>10}{'tokens/s':>11}"]
    lines += [f"{t.name:<20}{t.new_tokens:>8}{t.seconds:>10.2f}{t.tokens_per_s:>11.1f}" for t in timings]
    ratio = by["judgekit lossless"].tokens_per_s / max(by["HF assisted"].tokens_per_s, 1e-9)
    speedup = by["judgekit lossless"].tokens_per_s / max(by["target greedy"].tokens_per_s, 1e-9)
    lines.append(f"outputs identical: {identical}")
    lines.append(f"ratio judgekit / HF assisted: {ratio:.2f}x   judgekit / target greedy: {speedup:.2f}x")
    return "\n".join(lines)


def run_mine_bench(pair, task, problems, cfg, batch_size: int = 1) -> dict:
    """Mine the same problems with judgekit's miner (``batch_size`` problems advancing together) and the
    plain reference procedure (batch 1, no cache, rollouts to EOS/max_new_tokens); compare."""
    from judgekit.mining import Miner
    from judgekit.mining_reference import ReferenceMiner, label_agreement

    with torch.inference_mode():
        Miner(pair, task, cfg).mine(problems[0])  # warm-up
        secs_ours, ours = _time(lambda: list(Miner(pair, task, cfg, batch_size).mine_many(problems)), pair.device)
        secs_ref, ref = _time(lambda: [ReferenceMiner(pair, task, cfg).mine(p) for p in problems], pair.device)
    agreement, same, union = label_agreement(ours, ref)
    return {
        "problems": len(problems), "batch_size": batch_size, "agreement": agreement, "agreeing": same, "union": union,
        "mismatches": sum(len(r.records) for r in ours),
        "important": sum(m.important for r in ours for m in r.records),
        "rollouts_ours": sum(r.n_rollouts for r in ours), "rollouts_reference": sum(r.n_rollouts for r in ref),
        "seconds_ours": secs_ours, "seconds_reference": secs_ref, "speedup": secs_ref / max(secs_ours, 1e-9),
    }


def format_mine_report(r: dict, title: str) -> str:
    return "\n".join([
        title,
        f"problems {r['problems']} (judgekit batch size {r['batch_size']}), mismatches {r['mismatches']} ({r['important']} important), "
        f"rollouts judgekit {r['rollouts_ours']} / reference {r['rollouts_reference']}",
        f"label agreement: {r['agreement']:.4f} ({r['agreeing']}/{r['union']} mismatches)",
        f"wall time: judgekit {r['seconds_ours']:.2f}s, reference {r['seconds_reference']:.2f}s, "
        f"ratio reference / judgekit: {r['speedup']:.2f}x",
    ])
