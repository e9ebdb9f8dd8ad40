"""The closed-form side of the diagnostic framework (docs/design.md §2, the paper's §3, Lemma 1, Theorem 1).

Given (p, q) pairs — a synthetic family or the per-position distributions of a model pair along a task's
target responses — this computes, for every rule, its induced distribution P (``Rule.induced``), the
distance of P from the distribution the rule should be judged against (p, or p_A for the truncation rules:
their matched baseline), the expected acceptance sum_x q(x) h(x) of one drafted token, and Lemma 1's
decomposition of the change in acceptance that truncating the target (min-p, eta) causes:

    Delta BE = sum_{x in A} min((q - p)+, (1/z - 1) p)  -  sum_{x not in A} min(p, q),   z = sum_{x in A} p
               \\_________________ gain _______________/    \\_________ loss __________/

which equals sum_x min(p_A, q) - sum_x min(p, q), the acceptance of lossless verification against p_A minus
that against p. For speccascade / typical, KL(P || p_A) is Theorem 1's KL_SD.
Everything is vectorised over the pairs (rows); nothing here samples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from judgekit.errors import JudgekitError
from judgekit.decode.rules import (
    Rule,
    RuleContext,
    _Truncation,
    divergence,
    eta_set,
    make_rule,
    minp_set,
)

@dataclass
class Pairs:
    """Rows of target and draft distributions, [n, V] each, with the shapes truncation/fuzzy decide on."""

    p: Tensor
    q: Tensor
    source: str
    p_shape: Tensor | None = None  # greedy model pairs: p, q are one-hot, the shapes are the softmax
    q_shape: Tensor | None = None
    meta: dict = field(default_factory=dict)

    def context(self) -> RuleContext:
        return RuleContext(p_shape=self.p_shape, q_shape=self.q_shape)


# ----------------------------------------------------------------------------------------------------------
# Synthetic families


def synthetic_pairs(family: str, n: int, vocab: int, noise: float, seed: int = 0, zipf_s: float = 1.1,
                    alpha: float = 0.3, jitter: float = 0.5, sharpness: float = 1.0) -> Pairs:
    """n seeded (p, q) pairs: p from a Zipf law (exponent zipf_s, random token order, each weight scaled by
    exp(jitter * N(0, 1)) so the pairs' peaks and tails differ) or a Dirichlet(alpha);
    q = softmax(sharpness * log p + noise * N(0, 1)), so ``noise`` controls the p-q distance (0 and
    sharpness 1 give q = p) while q keeps p's support; sharpness > 1 makes an over-confident draft. The
    measured TV is reported with the results."""
    if n < 1 or vocab < 2:
        raise JudgekitError(f"need at least one pair and a vocabulary of >= 2 tokens, got n={n}, vocab={vocab}")
    if not noise >= 0.0:
        raise JudgekitError(f"noise must be >= 0, got {noise}")
    rng = np.random.default_rng(seed)
    if family == "zipf":
        base = np.arange(1, vocab + 1, dtype=np.float64) ** -zipf_s
        p = np.stack([rng.permutation(base) for _ in range(n)]) * np.exp(jitter * rng.standard_normal((n, vocab)))
    elif family == "dirichlet":
        p = rng.dirichlet(np.full(vocab, alpha), size=n)
    else:
        raise JudgekitError(f"unknown family {family!r}; use zipf or dirichlet")
    p = p / p.sum(-1, keepdims=True)
    with np.errstate(divide="ignore"):
        logits = sharpness * np.log(p) + noise * rng.standard_normal(p.shape)
    q = np.exp(logits - logits.max(-1, keepdims=True))
    q = q / q.sum(-1, keepdims=True)
    meta = {"family": family, "n": n, "vocab": vocab, "noise": noise, "sharpness": sharpness, "seed": seed}
    label = f"{family}(noise={noise:g}" + (f",sharpness={sharpness:g})" if sharpness != 1.0 else ")")
    return Pairs(torch.as_tensor(p), torch.as_tensor(q), label, meta=meta)


# ----------------------------------------------------------------------------------------------------------
# Per-rule quantities


def acceptance_all(rule: Rule, p: Tensor, q: Tensor, ctx: RuleContext) -> Tensor:
    """h(v) for every token v of every row, [n, V], in one call (rules accept a [n, V] block of tokens)."""
    n, vocab = q.shape
    x = torch.arange(vocab, device=q.device).expand(n, vocab)
    return rule.acceptance(p, q, x, ctx)


def expected_acceptance(rule: Rule, p: Tensor, q: Tensor, ctx: RuleContext) -> Tensor:
    """beta = sum_x q(x) h(x): the probability that one drafted token is accepted, per row."""
    h = acceptance_all(rule, p, q, ctx)
    return torch.where(q > 0, q * h, torch.zeros_like(q)).sum(-1)


def reference(rule: Rule, p: Tensor, ctx: RuleContext) -> tuple[Tensor, str]:
    """What a rule's output is compared with: p_A for the truncation rules (their matched baseline), else p."""
    if isinstance(rule, _Truncation):
        return rule._truncated(p, ctx), "p_A"
    return p, "p"


@dataclass
class RuleStats:
    rule: str
    params: dict
    reference: str
    tv: Tensor  # [n] TV(P, reference)
    kl: Tensor  # [n] KL(P || reference), inf where P has mass the reference lacks
    acceptance: Tensor  # [n]
    induced: Tensor  # [n, V]


def rule_stats(rule: Rule, pairs: Pairs) -> RuleStats:
    ctx = pairs.context()
    induced = rule.induced(pairs.p, pairs.q, ctx)
    ref, ref_name = reference(rule, pairs.p, ctx)
    params = {k: v for k, v in rule.describe().items() if k != "rule"}
    return RuleStats(rule.name, params, ref_name, divergence(induced, ref, "tv"), divergence(induced, ref, "kl"),
                     expected_acceptance(rule, pairs.p, pairs.q, ctx), induced)


def summarise(stats: RuleStats, pairs: Pairs) -> dict:
    """One table row: means over the pairs (KL over the pairs where it is finite, with the count where not)."""
    finite = torch.isfinite(stats.kl)
    kl = float(stats.kl[finite].mean()) if finite.any() else math.inf
    return {
        "source": pairs.source, "rule": stats.rule, "params": stats.params, "reference": stats.reference,
        "n": int(pairs.p.shape[0]), "tv_pq": float(divergence(pairs.p, pairs.q, "tv").mean()),
        "tv": float(stats.tv.mean()), "kl": kl, "kl_infinite": int((~finite).sum()),
        "acceptance": float(stats.acceptance.mean()),
    }


# ----------------------------------------------------------------------------------------------------------
# Lemma 1


def lemma1_terms(p: Tensor, q: Tensor, allowed: Tensor) -> tuple[Tensor, Tensor]:
    """(gain, loss) per row for truncating the target to the allowed set (Lemma 1); Delta BE = gain - loss."""
    z = (p * allowed).sum(-1, keepdim=True)
    grow = ((1.0 / z.clamp_min(1e-30) - 1.0) * p).clamp_min(0)  # z <= 1; rounding can make 1/z - 1 < 0
    gain = torch.where(allowed, torch.minimum((q - p).clamp_min(0), grow), torch.zeros_like(p)).sum(-1)
    loss = torch.where(allowed, torch.zeros_like(p), torch.minimum(p, q)).sum(-1)
    return gain, loss


def lemma1_sweep(pairs: Pairs, p_bases: list[float], epsilons: list[float],
                 delta: float | None = None) -> list[dict]:
    """Lemma 1's terms for min-p over p_base and eta over epsilon: mean and 10/90 % quantiles over the
    pairs, plus the acceptance difference measured through the rules (a check of the lemma). delta None:
    delta = sqrt(epsilon), the choice Hewitt et al. recommend for eta-sampling; else that delta throughout."""
    ctx = pairs.context()
    shape = pairs.p if pairs.p_shape is None else pairs.p_shape
    base = expected_acceptance(make_rule("lossless"), pairs.p, pairs.q, ctx)
    rows = []
    sweeps = [("minp", "p_base", v, minp_set(shape, v), make_rule("minp", p_base=v)) for v in p_bases]
    deltas = {v: math.sqrt(v) if delta is None else delta for v in epsilons}
    sweeps += [("eta", "epsilon", v, eta_set(shape, v, deltas[v]), make_rule("eta", epsilon=v, delta=deltas[v]))
               for v in epsilons]
    for truncation, param, value, allowed, rule in sweeps:
        gain, loss = lemma1_terms(pairs.p, pairs.q, allowed)
        net = gain - loss
        measured = expected_acceptance(rule, pairs.p, pairs.q, ctx) - base
        row = {"source": pairs.source, "truncation": truncation, "param": param, "value": value,
               "n": int(pairs.p.shape[0]), "gain": float(gain.mean()), "loss": float(loss.mean()),
               "delta_be": float(net.mean()), "delta_acceptance": float(measured.mean())}
        for name, t in (("gain", gain), ("loss", loss), ("delta_be", net)):
            lo, hi = torch.quantile(t.double(), torch.tensor([0.1, 0.9], dtype=torch.float64)).tolist()
            row[f"{name}_q10"], row[f"{name}_q90"] = lo, hi
        if truncation == "eta":
            row["delta"] = deltas[value]
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------------------------------------
# Rule specifications and the whole analysis


def rule_grid(names: list[str], values: dict[str, list]) -> list[Rule]:
    """Every rule named, once per combination of its own parameters' values (``values`` by sweep key, e.g.
    fuzzy_threshold; rules ignore the others' keys). Rules that need a trained judge are not analysable."""
    from judgekit.decode.params import RULE_SPECS, combinations, rule_spec

    analysable = [n for n, s in RULE_SPECS.items() if not s.needs_judge]
    rules = []
    for name in names:
        if name not in RULE_SPECS or rule_spec(name).needs_judge:
            raise JudgekitError(f"rule {name!r} cannot be analysed here; choose from {', '.join(analysable)}")
        rules += [make_rule(name, **c) for c in combinations(name, values)]
    return rules


def analyse(pairs: Pairs, rules: list[Rule]) -> list[dict]:
    return [summarise(rule_stats(rule, pairs), pairs) for rule in rules]


# ----------------------------------------------------------------------------------------------------------
# Pairs from a model pair along a task's target responses


@torch.inference_mode()
def model_pairs(target: str, draft: str, task_name: str, limit: int, temperature: float = 1.0,
                max_new_tokens: int = 128, device: str = "auto", dtype: str = "auto", split: str = "test",
                data_file: str | None = None) -> Pairs:
    """(p, q) at every position of the target's greedy responses to the first `limit` problems: the target
    answers greedily (speculative decoding with the lossless rule, so the text is the target's own), then
    both models read prompt + response once (teacher forcing) and their next-token distributions at the
    response positions are taken at `temperature` (0: one-hot argmax rows, softmax shapes kept)."""
    from judgekit.decode.decoder import SpeculativeDecoder
    from judgekit.decode.sampling import SamplingConfig, to_probs
    from judgekit.models import encode_prompt, load_model_pair
    from judgekit.tasks import get_task

    if limit < 1:
        raise JudgekitError(f"--limit must be >= 1, got {limit}")
    cfg = SamplingConfig(temperature)
    task = get_task(task_name)
    problems = task.load(split=split, limit=limit, data_file=data_file)
    pair = load_model_pair(target, draft, device, dtype)
    decoder = SpeculativeDecoder(pair, make_rule("lossless"), block_size=4)
    ps, qs, p_shapes, q_shapes = [], [], [], []
    n_tokens = 0
    for i, problem in enumerate(problems):
        prompt = encode_prompt(pair.tokenizer, task.build_prompt(problem, pair.tokenizer))
        gen = decoder.generate_ids(prompt, max_new_tokens, task.stop_strings, seed=i)
        if not gen.token_ids:
            continue
        ids = torch.tensor([prompt + gen.token_ids], device=pair.device)
        span = slice(len(prompt) - 1, ids.shape[1] - 1)  # logits that predict each response token
        for model, out, shapes in ((pair.target, ps, p_shapes), (pair.draft, qs, q_shapes)):
            logits = model(ids).logits[0, span, : pair.vocab_size].double()
            probs, shape = to_probs(logits, cfg, need_shape=True)
            out.append(probs.double().cpu())
            shapes.append(None if shape is None else shape.double().cpu())
        n_tokens += len(gen.token_ids)
    if not ps:
        raise JudgekitError("the target produced no tokens to analyse")
    p_shape = torch.cat(p_shapes) if p_shapes[0] is not None else None
    q_shape = torch.cat(q_shapes) if q_shapes[0] is not None else None
    meta = {"target": target, "draft": draft, "task": task_name, "problems": len(problems), "tokens": n_tokens,
            "temperature": temperature}
    return Pairs(torch.cat(ps), torch.cat(qs), f"{task_name}(T={temperature:g})", p_shape, q_shape, meta)


# ----------------------------------------------------------------------------------------------------------
# Theorem 1: truncation-based verification on a chain (KL_SD) and on an EAGLE-style tree (KL_EAGLE)

# the truncation-based verification rules and their matched truncation-sampling baselines
MATCHED_BASELINE = {"speccascade": "minp", "typical": "eta"}


def matched_baseline(rule: Rule) -> Rule:
    """Truncation sampling + lossless SD with the same allowed set as a truncation-based verification rule."""
    if rule.name not in MATCHED_BASELINE:
        raise JudgekitError(f"rule {rule.name!r} has no matched truncation baseline")
    params = {k: v for k, v in rule.describe().items() if k != "rule"}
    return make_rule(MATCHED_BASELINE[rule.name], **params)


def theorem1(pairs: Pairs, rule: Rule, widths: list[int]) -> list[dict]:
    """KL from the matched target p_A of what a truncation-based rule emits, per position: on a chain with a
    sampled draft token, KL_SD = KL(q_A || p_A) (Theorem 1; it vanishes as q -> p), and on a tree whose m
    siblings are the draft's top-m tokens (EAGLE), KL_EAGLE = log(Z_A(p) / p(x*)) at the deterministic first
    sibling x* in A (p_A where none is; it does not vanish as q -> p). Beside them the acceptance of one
    position, a = P(some sibling accepted), for the rule and for its matched baseline (G.5's comparison)."""
    from judgekit.decode.tree_verify import tree_induced

    ctx = pairs.context()
    p, q = pairs.p, pairs.q
    target = rule._truncated(p, ctx)
    base = matched_baseline(rule)
    kl_sd = divergence(rule.induced(p, q, ctx), target, "kl")
    common = {"source": pairs.source, "rule": rule.name,
              "params": {k: v for k, v in rule.describe().items() if k != "rule"}, "n": int(p.shape[0]),
              "tv_pq": float(divergence(p, q, "tv").mean()),
              "acceptance_sd": float(expected_acceptance(rule, p, q, ctx).mean()),
              "baseline_acceptance_sd": float(expected_acceptance(base, p, q, ctx).mean())}
    rows = []
    for m in widths:
        law = tree_induced(rule, p, q, ctx, m, "topk")
        kl_eagle = divergence(law.law, target, "kl")
        row = dict(common, width=m, kl_sd=_finite_mean(kl_sd), kl_sd_infinite=int((~torch.isfinite(kl_sd)).sum()),
                   kl_eagle=_finite_mean(kl_eagle), kl_eagle_infinite=int((~torch.isfinite(kl_eagle)).sum()),
                   acceptance_eagle=float(law.acceptance.mean()),
                   baseline_acceptance_eagle=float(tree_induced(base, p, q, ctx, m, "topk").acceptance.mean()))
        for name, t in (("kl_sd", kl_sd), ("kl_eagle", kl_eagle)):
            finite = t[torch.isfinite(t)].double()
            lo, hi = (torch.quantile(finite, torch.tensor([0.1, 0.9], dtype=torch.float64)).tolist()
                      if finite.numel() else (math.inf, math.inf))
            row[f"{name}_q10"], row[f"{name}_q90"] = lo, hi
        rows.append(row)
    return rows


def _finite_mean(t: Tensor) -> float:
    finite = torch.isfinite(t)
    return float(t[finite].mean()) if finite.any() else math.inf


def theorem1_rows(sources: list[Pairs], rules: list[Rule], widths: list[int]) -> list[dict]:
    """:func:`theorem1` for every truncation-based verification rule among ``rules`` on every source."""
    picked = [r for r in rules if r.name in MATCHED_BASELINE]
    return [row for pairs in sources for rule in picked for row in theorem1(pairs, rule, widths)]
