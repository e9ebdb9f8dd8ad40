"""Goodness-of-fit checks for sampled tokens, shared by the rule and decoder tests.

Two bounds, both at a false-alarm level of ALPHA = 1e-6 per check (tests seed every generator, so each
outcome is deterministic; ALPHA says how unlikely a wrong verdict was when the seeds were chosen):

* Pearson's chi-square statistic against the exact (1 - ALPHA) quantile of chi^2 with m - 1 degrees of
  freedom (m = cells of positive expected mass; an observation in a zero-mass cell fails outright);
* the Bretagnolle-Huber-Carol inequality, a finite-sample distribution-free bound:
  P(||p_hat - p||_1 >= eps) <= 2^V exp(-N eps^2 / 2), so eps = sqrt(2 (V ln 2 + ln(1/ALPHA)) / N).

With N = 20,000 draws over a handful of cells, both reject a sampler whose output is off by a total
variation of about 0.03 (test_rules.py's planted-mistake tests show it; test_decoding.py's checks were
tried the same way, with mistakes planted by hand in the rules, the verifier and the decoder).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping

import numpy as np

ALPHA = 1e-6


def chi2_sf(x: float, dof: int) -> float:
    """Survival function of chi^2_dof, exact for integer dof via Q(d+2, x) = Q(d, x) + term(d, x)."""
    if x <= 0:
        return 1.0
    half = x / 2.0
    if dof % 2 == 0:
        q, s = math.exp(-half), 2
    else:
        q, s = math.erfc(math.sqrt(half)), 1
    while s < dof:
        q += math.exp(s / 2.0 * math.log(half) - half - math.lgamma(s / 2.0 + 1.0))
        s += 2
    return q


def chi2_quantile(upper_tail: float, dof: int) -> float:
    """x with P(chi^2_dof >= x) = upper_tail, by bisection."""
    lo, hi = 0.0, 1.0
    while chi2_sf(hi, dof) > upper_tail:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if chi2_sf(mid, dof) > upper_tail:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def mc_bounds(vocab, n, n_cells):
    return chi2_quantile(ALPHA, n_cells - 1), math.sqrt(2 * (vocab * math.log(2) + math.log(1 / ALPHA)) / n)


def gof(counts: np.ndarray, expected_p: np.ndarray):
    """(Pearson statistic, its 1 - ALPHA chi-square bound, L1 distance, its BHC bound)."""
    n = counts.sum()
    pos = expected_p > 1e-12
    if counts[~pos].any():
        stat = math.inf
    else:
        e = n * expected_p[pos]
        stat = float(((counts[pos] - e) ** 2 / e).sum())
    chi_bound, l1_bound = mc_bounds(len(expected_p), n, int(pos.sum()))
    l1 = float(np.abs(counts / n - expected_p).sum())
    return stat, chi_bound, l1, l1_bound


def gof_sparse(observed: Iterable[Hashable], expected: Mapping[Hashable, float]):
    """:func:`gof` for outcomes from a large space (tokens of a vocabulary, token sequences) where
    ``expected`` lists the few outcomes of positive mass: those are the cells, plus one zero-mass cell for
    everything else, so the BHC bound counts V = len(expected) + 1 cells, not the whole space."""
    keys = [k for k, v in expected.items() if v > 1e-12]
    counts = Counter(observed)
    inside = np.array([counts.get(k, 0) for k in keys] + [sum(counts.values()) - sum(counts.get(k, 0) for k in keys)])
    want = np.array([expected[k] for k in keys] + [0.0])
    return gof(inside, want / want.sum())
