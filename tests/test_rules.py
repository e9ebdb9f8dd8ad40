"""Tests of judgekit.decode.rules against the paper (docs/design.md §2).

The reference closed forms below are written independently of judgekit.decode.rules, in float64 numpy, straight
from the paper's text ("Revisiting Lossy Verification in Speculative Decoding"):

* eq. 8  (interpolation / CoS):     P = lam p + (1 - lam) q
* Table 1 (ablations of lenience):  f = q + Delta_l (p - q) where q <= p, lam p + (1 - lam) q above
                                    (cos-adaptive); f = lam p + (1 - lam) q where q <= p / lam, p / lam
                                    above, P = f / sum f (cos-ceiling-rescaled; the documented
                                    normalisation); cos-ceiling keeps f where q > p and gives the
                                    under-region q + Delta (p - q), Delta = sum (q - f)+ / TV (the cap holds)
* eq. 10 (lenience):                piecewise in q <= p, p < q <= p/l, q >= p/l, with Delta_l as in sec. 3.1
* eq. 12 (judge, appendix F.1):     piecewise in q <= p, q > p & j = 0, q > p & j = 1, Delta_j = R_j / R
* sec. 3.2 (truncation-based):      q / Z_Theta(q) on A_Theta, 0 off it (p_Theta when Z_Theta(q) = 0,
                                    the documented choice of _TruncationVerify)
* sec. 2.3 (matched baseline):      p_Theta = p / Z_Theta(p) on A_Theta
* appendix A.2 (fuzzy SD):          q where D(p, q) < T, else p
* lossless:                         p

The Monte Carlo tests drive the sampling path the decoder runs, :func:`judgekit.decode.verify.verify_batch` (all
draws as one batch of blocks; tests/test_fastpath.py checks it draws exactly as a written-out one-block verifier),
and compare the empirical distribution of the emitted token with ``rule.induced`` using two bounds
(tests/stat_checks.py), both at a false-alarm level of ALPHA = 1e-6 per check (and all generators are
seeded, so the outcome is deterministic):

* Pearson's chi-square statistic against the exact (1 - ALPHA) quantile of chi^2 with m - 1 degrees of
  freedom (m = cells of positive expected mass; an observation in a zero-mass cell fails outright);
* the Bretagnolle-Huber-Carol inequality, a finite-sample distribution-free bound:
  P(||p_hat - p||_1 >= eps) <= 2^V exp(-N eps^2 / 2), so eps = sqrt(2 (V ln 2 + ln(1/ALPHA)) / N).

A planted-mistake test shows that the same check rejects rules whose residual or acceptance is wrong.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from stat_checks import ALPHA, chi2_quantile, gof

from judgekit.errors import JudgekitError
from judgekit.decode.rules import (
    CoS,
    CoSCeiling,
    CoSCeilingRescaled,
    Lenience,
    Lossless,
    Rule,
    RuleContext,
    eta_set,
    generic_induced,
    make_rule,
    minp_set,
)
from judgekit.decode.verify import verify_batch, verify_block

torch.set_num_threads(1)

DTYPE = torch.float64


def test_chi2_quantile_matches_tables():
    # Standard table values (e.g. NIST/SEMATECH e-Handbook, upper critical values of chi-square).
    assert chi2_quantile(0.05, 2) == pytest.approx(5.991, abs=1e-3)
    assert chi2_quantile(0.01, 4) == pytest.approx(13.277, abs=1e-3)
    assert chi2_quantile(0.001, 1) == pytest.approx(10.828, abs=1e-3)
    assert chi2_quantile(0.001, 7) == pytest.approx(24.322, abs=1e-3)
    assert chi2_quantile(0.001, 10) == pytest.approx(29.588, abs=1e-3)
    try:  # cross-check against scipy where it happens to be installed
        from scipy.stats import chi2
    except ImportError:
        return
    for dof in (1, 2, 3, 5, 7, 8):
        assert chi2_quantile(ALPHA, dof) == pytest.approx(chi2.isf(ALPHA, dof), rel=1e-6)


# ----------------------------------------------------------------------------------------------------------
# Independent references, written from the paper (numpy, float64, one position at a time).


def ref_lossless(p, q):
    return p.copy()


def ref_cos(p, q, lam):  # eq. 8
    return lam * p + (1 - lam) * q


def ref_lenience(p, q, ell):  # eq. 10, Delta_l from sec. 3.1
    tv = 0.5 * np.abs(q - p).sum()
    out = np.empty_like(p)
    if tv == 0.0:  # p == q: nothing is ever rejected, every token falls in the first two regions
        delta = 0.0
    else:
        delta = (0.5 * np.abs(q - p / ell).sum() + 0.5 - 0.5 / ell) / tv
    for v in range(len(p)):
        if q[v] <= p[v]:
            out[v] = delta * p[v] + (1 - delta) * q[v]
        elif q[v] <= p[v] / ell:
            out[v] = q[v]
        else:
            out[v] = p[v] / ell
    return out


def ref_cos_adaptive(p, q, lam):  # Table 1, left column, normalised
    tv = 0.5 * np.abs(q - p).sum()
    # Delta_l of eq. 10 at l = lam, in the paper's own absolute-value form
    delta = (0.5 * np.abs(q - p / lam).sum() + 0.5 - 0.5 / lam) / tv if tv > 0 else 1.0
    f = np.array([q[v] + delta * (p[v] - q[v]) if q[v] <= p[v] else lam * p[v] + (1 - lam) * q[v]
                  for v in range(len(p))])
    return f / f.sum()


def _ref_ceiling_f(p, q, lam):  # Table 1, right column, as printed
    return np.array([lam * p[v] + (1 - lam) * q[v] if q[v] <= p[v] / lam else p[v] / lam for v in range(len(p))])


def ref_cos_ceiling_rescaled(p, q, lam):  # Table 1, right column, normalised
    f = _ref_ceiling_f(p, q, lam)
    return f / f.sum()


def ref_cos_ceiling(p, q, lam):  # Table 1, right column where q > p; the lossless residual fills q <= p
    f = _ref_ceiling_f(p, q, lam)
    over = q > p
    tv = 0.5 * np.abs(q - p).sum()
    delta = (q[over] - f[over]).sum() / tv if tv > 0 else 1.0
    return np.where(over, f, q + delta * (p - q))


def ref_judge(p, q, j):  # eq. 12, Delta_j = R_j / R (appendix F.1)
    big_r = np.clip(p - q, 0, None).sum()
    r_j = (np.clip(q - p, 0, None) * (1 - j)).sum()
    delta = r_j / big_r if big_r > 0 else 0.0
    out = np.empty_like(p)
    for v in range(len(p)):
        if q[v] <= p[v]:
            out[v] = delta * p[v] + (1 - delta) * q[v]
        elif j[v] == 0:
            out[v] = p[v]
        else:
            out[v] = q[v]
    return out


def ref_minp_set(shape, p_base):  # eq. 5
    return shape >= p_base * shape.max()


def ref_eta_set(shape, eps, delta):  # eq. 6
    nz = shape[shape > 0]
    entropy = -(nz * np.log(nz)).sum()
    allowed = shape >= min(eps, delta * math.exp(-entropy))
    # The argmax is always allowed: for delta <= 1 the paper's set holds it anyway (max p >= exp(-H(p)),
    # the min-entropy is at most the entropy), but at equality (uniform p, delta = 1) rounding can empty
    # the set; eta_set documents the same guard.
    allowed |= shape >= shape.max()
    return allowed


def ref_truncated(p, allowed):  # p_Theta, sec. 2.3
    z = p[allowed].sum()
    return np.where(allowed, p / z, 0.0)


def ref_truncation_verify(p, q, allowed):  # sec. 3.2; p_Theta where Z_Theta(q) = 0 (see _TruncationVerify)
    z = q[allowed].sum()
    if z == 0.0:
        return ref_truncated(p, allowed)
    return np.where(allowed, q / z, 0.0)


def ref_divergence(p, q, kind):
    def kl(a, b):
        total = 0.0
        for av, bv in zip(a, b):
            if av > 0:
                if bv <= 0:
                    return math.inf
                total += av * math.log(av / bv)
        return total

    if kind == "tv":
        return 0.5 * np.abs(p - q).sum()
    if kind == "kl":
        return kl(p, q)
    m = 0.5 * (p + q)
    return 0.5 * kl(p, m) + 0.5 * kl(q, m)


def ref_fuzzy(p, q, threshold, kind):  # appendix A.2
    return q.copy() if ref_divergence(p, q, kind) < threshold else p.copy()


# ----------------------------------------------------------------------------------------------------------
# Random (p, q) pairs, edge cases included.


def _dirichlet(rng, vocab, conc, sparse=False):
    w = rng.gamma(conc, size=vocab)
    if sparse:
        w[rng.random(vocab) < 0.4] = 0.0
        if w.sum() == 0:
            w[rng.integers(vocab)] = 1.0
    return w / w.sum()


def _one_hot(vocab, i):
    e = np.zeros(vocab)
    e[i] = 1.0
    return e


def random_pairs(seed=0, per_vocab=40):
    """(p, q) pairs: random, peaked, sparse, p == q, disjoint supports, one-hot, uniform."""
    rng = np.random.default_rng(seed)
    pairs = []
    for vocab in (2, 3, 7, 50):
        for i in range(per_vocab):
            conc = (0.1, 0.5, 1.0, 5.0)[i % 4]
            pairs.append((_dirichlet(rng, vocab, conc), _dirichlet(rng, vocab, conc)))
            pairs.append((_dirichlet(rng, vocab, conc, True), _dirichlet(rng, vocab, conc, True)))
        p = _dirichlet(rng, vocab, 1.0)
        pairs.append((p, p.copy()))  # p == q
        half = vocab // 2
        a, b = np.zeros(vocab), np.zeros(vocab)  # disjoint supports
        a[:half] = rng.random(half) + 0.1
        b[half:] = rng.random(vocab - half) + 0.1
        pairs.append((a / a.sum(), b / b.sum()))
        pairs.append((b / b.sum(), a / a.sum()))
        pairs.append((_one_hot(vocab, 0), _one_hot(vocab, vocab - 1)))  # one-hot, disagreeing
        pairs.append((_one_hot(vocab, 1), _one_hot(vocab, 1)))  # one-hot, agreeing
        pairs.append((_one_hot(vocab, 0), _dirichlet(rng, vocab, 1.0)))
        pairs.append((_dirichlet(rng, vocab, 1.0), _one_hot(vocab, 0)))
        pairs.append((np.full(vocab, 1.0 / vocab), _dirichlet(rng, vocab, 0.3)))
    return pairs


PAIRS = random_pairs()


def _t(a):
    return torch.as_tensor(np.asarray(a), dtype=DTYPE)


def _stack(pairs):
    """Group pairs by vocabulary size into [k, V] tensors."""
    groups: dict[int, list] = {}
    for p, q in pairs:
        groups.setdefault(len(p), []).append((p, q))
    return {v: (_t([p for p, _ in g]), _t([q for _, q in g])) for v, g in groups.items()}


STACKED = _stack(PAIRS)


def table_judge(table: torch.Tensor):
    """A judge whose P(important) is table[position, token]; the position is read from hidden[:, 0]."""

    def judge(hidden: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        assert hidden.ndim == 2 and tokens.ndim == 1 and hidden.shape[0] == tokens.shape[0]
        return table[hidden[:, 0].long(), tokens]

    return judge


def judge_setup(k, vocab, seed, threshold=0.5):
    """Random verdicts j [k, V] (True = unimportant) and a consistent judge rule + context."""
    g = torch.Generator().manual_seed(seed)
    j = torch.rand(k, vocab, generator=g) < 0.5
    table = torch.where(j, 0.2, 0.8).to(DTYPE)  # P(important); j = 1[P < threshold]
    rule = make_rule("judge", judge=table_judge(table), threshold=threshold)
    hidden = torch.arange(k, dtype=DTYPE).unsqueeze(1).repeat(1, 3)
    return rule, RuleContext(hidden=hidden, judge_vocab=j), j


def assert_rows_close(got, want, atol=1e-9):
    np.testing.assert_allclose(got.numpy(), np.asarray(want), atol=atol, rtol=0)


def assert_distribution(rows, atol=1e-9):
    rows = rows.numpy()
    assert np.isfinite(rows).all()
    assert (rows >= -atol).all()
    np.testing.assert_allclose(rows.sum(-1), 1.0, atol=atol)


# ----------------------------------------------------------------------------------------------------------
# 1. Closed forms agree with the paper's equations.


def test_reference_closed_forms_are_distributions():
    """Sanity of the references themselves (they are what the implementation is judged against)."""
    rng = np.random.default_rng(1)
    for p, q in PAIRS:
        j = rng.random(len(p)) < 0.5
        for ref in (ref_lenience(p, q, 0.3), ref_judge(p, q, j), ref_cos(p, q, 0.3)):
            assert ref.min() >= -1e-12 and abs(ref.sum() - 1) < 1e-9


def _all_tokens(rule, p, q, ctx):
    """h(v) for every token v of every row: [k, V]."""
    k, vocab = q.shape
    return torch.stack([rule.acceptance(p, q, torch.full((k,), v), ctx) for v in range(vocab)], -1)


def test_lossless_mechanism_yields_p():
    """Leviathan et al.: h = min(1, p/q) and r = norm((p - q)+) (written here in numpy) give back p exactly;
    the rule's own acceptance and residual must be those, and its closed form must be p."""
    rule = make_rule("lossless")
    for vocab, (p, q) in STACKED.items():
        pn, qn = p.numpy(), q.numpy()
        h = np.where(qn > 0, np.minimum(1.0, pn / np.where(qn > 0, qn, 1.0)), 1.0)
        rest = np.clip(pn - qn, 0, None)
        z = rest.sum(-1, keepdims=True)
        r = np.where(z > 1e-12, rest / np.where(z > 1e-12, z, 1.0), pn)
        got_h = _all_tokens(rule, p, q, RuleContext()).numpy()
        np.testing.assert_allclose(np.where(qn > 0, got_h, 0), np.where(qn > 0, h, 0), atol=1e-12)
        assert_rows_close(rule.residual(p, q, RuleContext()), r)
        mech = qn * h + (1 - (qn * h).sum(-1, keepdims=True)) * r
        np.testing.assert_allclose(mech, pn, atol=1e-9)
        assert_rows_close(generic_induced(rule, p, q, RuleContext()), ref_lossless(pn, qn))
        assert_rows_close(rule.induced(p, q, RuleContext()), mech)


@pytest.mark.parametrize("lam", [0.0, 0.25, 0.5, 0.9, 1.0])
def test_cos_induced_matches_eq8(lam):
    """Eq. 8 against what the rule's own acceptance and residual emit (generic_induced), and against the
    appendix A.1 mechanism written out in numpy: h = min(1, nu/q), r = (nu - q)+ / sum (nu - q)+."""
    rule = make_rule("cos", lam=lam)
    for vocab, (p, q) in STACKED.items():
        pn, qn = p.numpy(), q.numpy()
        want = np.array([ref_cos(a, b, lam) for a, b in zip(pn, qn)])
        assert_rows_close(generic_induced(rule, p, q, RuleContext()), want)
        assert_rows_close(rule.induced(p, q, RuleContext()), want)
        nu = lam * pn + (1 - lam) * qn
        h = np.where(qn > 0, np.minimum(1.0, nu / np.where(qn > 0, qn, 1.0)), 0.0)
        got_h = _all_tokens(rule, p, q, RuleContext()).numpy()
        np.testing.assert_allclose(np.where(qn > 0, got_h, 0), h, atol=1e-12)
        rest = np.clip(nu - qn, 0, None)
        z = rest.sum(-1, keepdims=True)
        has_rest = z[:, 0] > 1e-12
        r = rest[has_rest] / z[has_rest]
        assert_rows_close(rule.residual(p, q, RuleContext())[torch.as_tensor(has_rest)], r)


@pytest.mark.parametrize("lam", [0.05, 0.25, 0.5, 0.9, 1.0])
@pytest.mark.parametrize("name,ref", [("cos-adaptive", ref_cos_adaptive), ("cos-ceiling", ref_cos_ceiling),
                                      ("cos-ceiling-rescaled", ref_cos_ceiling_rescaled)])
def test_cos_ablations_match_table1(name, ref, lam):
    """Table 1's two ablations: closed form and the rule's own mechanism (generic_induced) both equal the
    normalised Table 1 formula; at lam = 1 both are lossless."""
    rule = make_rule(name, lam=lam)
    for vocab, (p, q) in STACKED.items():
        want = [ref(a, b, lam) for a, b in zip(p.numpy(), q.numpy())]
        assert_rows_close(rule.induced(p, q, RuleContext()), want)
        assert_rows_close(generic_induced(rule, p, q, RuleContext()), want)
        if lam == 1.0:
            assert_rows_close(rule.induced(p, q, RuleContext()), p.numpy())


def test_cos_ablations_differ_from_cos_and_lenience():
    """On the random pairs the ablations are neither CoS nor lenience (else the ablation would be empty):
    cos-adaptive differs from CoS only through Delta_l != lam, cos-ceiling only above p / lam."""
    lam = 0.4
    gaps = {"cos-adaptive": [], "cos-ceiling": [], "cos-ceiling-rescaled": []}
    for p, q in PAIRS:
        cos, len_ = ref_cos(p, q, lam), ref_lenience(p, q, lam)
        for name, ref in (("cos-adaptive", ref_cos_adaptive), ("cos-ceiling", ref_cos_ceiling),
                          ("cos-ceiling-rescaled", ref_cos_ceiling_rescaled)):
            got = ref(p, q, lam)
            gaps[name].append(min(0.5 * np.abs(got - cos).sum(), 0.5 * np.abs(got - len_).sum()))
    for name in ("cos-adaptive", "cos-ceiling-rescaled"):
        assert np.median(gaps[name]) > 0.01, (name, np.median(gaps[name]))
    # The capped ceiling differs from lenience (l = lam) only through the mixture on p < q <= p / lam: on
    # sparse random pairs most overshoots lie beyond the cap, where both give p / lam, so it equals lenience
    # there; it must still differ from both parents on a good share of the pairs.
    assert np.mean(np.array(gaps["cos-ceiling"]) > 0.01) > 0.2
    for p, q in PAIRS:
        if not ((q > p) & (q <= p / lam)).any():
            np.testing.assert_allclose(ref_cos_ceiling(p, q, lam), ref_lenience(p, q, lam), atol=1e-12)


def test_cos_ceiling_keeps_its_cap_where_rescaling_breaks_it():
    """The issue's example: p = [0.9, 0.1], q = [0.3, 0.7], lam = 0.5, cap p / lam = 0.2 on token 1. The capped
    reading emits exactly [0.8, 0.2]; the rescaled one [0.75, 0.25], over the cap. On random pairs the capped
    reading never passes p / lam where q > p, nor p where q <= p."""
    p, q = _t([0.9, 0.1]).unsqueeze(0), _t([0.3, 0.7]).unsqueeze(0)
    for name, want in (("cos-ceiling", [0.8, 0.2]), ("cos-ceiling-rescaled", [0.75, 0.25])):
        rule = make_rule(name, lam=0.5)
        assert_rows_close(rule.induced(p, q, RuleContext()), [want])
        assert_rows_close(generic_induced(rule, p, q, RuleContext()), [want])
    broke = 0
    for lam in (0.2, 0.5, 0.8):
        for p, q in PAIRS:
            capped, rescaled = ref_cos_ceiling(p, q, lam), ref_cos_ceiling_rescaled(p, q, lam)
            over = q > p
            assert (capped[over] <= np.minimum(q, p / lam)[over] + 1e-12).all()
            assert (capped[~over] <= p[~over] + 1e-12).all()
            broke += bool((rescaled[over] > p[over] / lam + 1e-9).any())
    assert broke > 0  # the rescaled reading does break the cap on some random pairs


@pytest.mark.parametrize("ell", [0.05, 0.3, 0.5, 0.8, 1.0])
def test_lenience_induced_matches_eq10(ell):
    rule = make_rule("lenience", lenience=ell)
    for vocab, (p, q) in STACKED.items():
        want = [ref_lenience(a, b, ell) for a, b in zip(p.numpy(), q.numpy())]
        assert_rows_close(rule.induced(p, q, RuleContext()), want)
    if ell == 1.0:  # l = 1 is lossless
        for vocab, (p, q) in STACKED.items():
            assert_rows_close(rule.induced(p, q, RuleContext()), p.numpy())


def test_lenience_regions_are_all_exercised():
    """The random pairs do hit all three regions of eq. 10 (else the test above would be vacuous)."""
    ell = 0.5
    hits = set()
    for p, q in PAIRS:
        hits |= {0} if (q <= p).any() else set()
        hits |= {1} if ((p < q) & (q <= p / ell)).any() else set()
        hits |= {2} if (q > p / ell).any() else set()
    assert hits == {0, 1, 2}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_judge_induced_matches_eq12(seed):
    for vocab, (p, q) in STACKED.items():
        rule, ctx, j = judge_setup(p.shape[0], vocab, seed * 100 + vocab)
        want = [ref_judge(a, b, jj) for a, b, jj in zip(p.numpy(), q.numpy(), j.numpy().astype(float))]
        assert_rows_close(rule.induced(p, q, ctx), want)
    # all-keep verdicts give q, all-reject verdicts give p (lossless)
    for vocab, (p, q) in STACKED.items():
        k = p.shape[0]
        rule, _, _ = judge_setup(k, vocab, 0)
        assert_rows_close(rule.induced(p, q, RuleContext(judge_vocab=torch.ones(k, vocab, dtype=torch.bool))), q.numpy())
        assert_rows_close(rule.induced(p, q, RuleContext(judge_vocab=torch.zeros(k, vocab, dtype=torch.bool))), p.numpy())


@pytest.mark.parametrize("p_base", [0.05, 0.3, 0.7])
def test_minp_sets_and_closed_forms(p_base):
    spec, matched = make_rule("speccascade", p_base=p_base), make_rule("minp", p_base=p_base)
    for vocab, (p, q) in STACKED.items():
        sets = [ref_minp_set(a, p_base) for a in p.numpy()]
        assert (minp_set(p, p_base).numpy() == np.array(sets)).all()
        assert_rows_close(spec.induced(p, q, RuleContext()),
                          [ref_truncation_verify(a, b, s) for a, b, s in zip(p.numpy(), q.numpy(), sets)])
        assert_rows_close(matched.induced(p, q, RuleContext()), [ref_truncated(a, s) for a, s in zip(p.numpy(), sets)])


@pytest.mark.parametrize("eps,delta", [(0.0009, 0.03), (0.05, 0.9), (0.2, 0.5), (0.5, 1.0)])
def test_eta_sets_and_closed_forms(eps, delta):
    typical, matched = make_rule("typical", epsilon=eps, delta=delta), make_rule("eta", epsilon=eps, delta=delta)
    for vocab, (p, q) in STACKED.items():
        sets = [ref_eta_set(a, eps, delta) for a in p.numpy()]
        assert (eta_set(p, eps, delta).numpy() == np.array(sets)).all()
        assert_rows_close(typical.induced(p, q, RuleContext()),
                          [ref_truncation_verify(a, b, s) for a, b, s in zip(p.numpy(), q.numpy(), sets)])
        assert_rows_close(matched.induced(p, q, RuleContext()), [ref_truncated(a, s) for a, s in zip(p.numpy(), sets)])


def test_eta_set_never_empty():
    p = _t([[0.3, 0.3, 0.4], [0.5, 0.25, 0.25]])
    assert eta_set(p, 0.9, 50.0).any(-1).all()


def test_truncation_zero_mass_case_emits_truncated_target():
    """Z_Theta(q) = 0: the draft has no mass on A; the induced distribution is p_Theta (docstring)."""
    p = _t([[0.5, 0.3, 0.15, 0.05]])
    q = _t([[0.0, 0.0, 0.4, 0.6]])
    rule = make_rule("speccascade", p_base=0.5)  # A = {0, 1}
    assert_rows_close(rule.induced(p, q, RuleContext()), [[0.625, 0.375, 0.0, 0.0]])
    assert_rows_close(generic_induced(rule, p, q, RuleContext()), [[0.625, 0.375, 0.0, 0.0]])


def test_truncation_sets_read_p_shape():
    """Greedy: p is one-hot, the allowed set is computed from ctx.p_shape (the temperature-1 softmax)."""
    shape = _t([[0.4, 0.35, 0.2, 0.05]])
    p = _t([[1.0, 0.0, 0.0, 0.0]])
    q = _t([[0.0, 0.5, 0.0, 0.5]])
    ctx = RuleContext(p_shape=shape)
    spec = make_rule("speccascade", p_base=0.5)  # A = {0, 1} from the shape, {0} from the one-hot p
    assert_rows_close(spec.induced(p, q, ctx), [[0.0, 1.0, 0.0, 0.0]])
    assert_rows_close(make_rule("minp", p_base=0.5).induced(p, q, ctx), [[1.0, 0.0, 0.0, 0.0]])


@pytest.mark.parametrize("kind", ["kl", "tv", "js"])
def test_fuzzy_induced_matches_appendix_a2(kind):
    for vocab, (p, q) in STACKED.items():
        divs = [ref_divergence(a, b, kind) for a, b in zip(p.numpy(), q.numpy())]
        finite = sorted(d for d in divs if math.isfinite(d))
        # thresholds that split the pairs: at the median divergence and beyond every one
        for threshold in (0.0, finite[len(finite) // 2] * 1.0001, 1e9):
            rule = make_rule("fuzzy", threshold=threshold, divergence=kind)
            want = [ref_fuzzy(a, b, threshold, kind) for a, b in zip(p.numpy(), q.numpy())]
            assert_rows_close(rule.induced(p, q, RuleContext()), want)


def test_fuzzy_gate_reads_shapes():
    p, q = _t([[1.0, 0.0, 0.0]]), _t([[0.0, 1.0, 0.0]])  # one-hot: KL = inf
    shape_p, shape_q = _t([[0.5, 0.3, 0.2]]), _t([[0.45, 0.35, 0.2]])
    rule = make_rule("fuzzy", threshold=0.1, divergence="kl")
    assert_rows_close(rule.induced(p, q, RuleContext()), p.numpy())
    assert_rows_close(rule.induced(p, q, RuleContext(p_shape=shape_p, q_shape=shape_q)), q.numpy())


# ----------------------------------------------------------------------------------------------------------
# 2. generic_induced (from h and r) == induced (closed form) for every rule; rows are distributions.

RULE_SPECS = [
    ("lossless", {}),
    ("lenience", {"lenience": 0.05}),
    ("lenience", {"lenience": 0.5}),
    ("lenience", {"lenience": 1.0}),
    ("cos", {"lam": 0.0}),
    ("cos", {"lam": 0.4}),
    ("cos", {"lam": 1.0}),
    ("cos-adaptive", {"lam": 0.3}),
    ("cos-adaptive", {"lam": 0.8}),
    ("cos-ceiling", {"lam": 0.3}),
    ("cos-ceiling", {"lam": 0.8}),
    ("cos-ceiling-rescaled", {"lam": 0.3}),
    ("cos-ceiling-rescaled", {"lam": 0.8}),
    ("fuzzy", {"threshold": 0.3, "divergence": "kl"}),
    ("fuzzy", {"threshold": 0.2, "divergence": "tv"}),
    ("fuzzy", {"threshold": 0.05, "divergence": "js"}),
    ("judge", {}),
    ("speccascade", {"p_base": 0.3}),
    ("typical", {"epsilon": 0.05, "delta": 0.9}),
    ("minp", {"p_base": 0.3}),
    ("eta", {"epsilon": 0.05, "delta": 0.9}),
]


def build(name, params, k, vocab, seed=0):
    if name == "judge":
        rule, ctx, _ = judge_setup(k, vocab, seed)
        return rule, ctx
    return make_rule(name, **params), RuleContext()


@pytest.mark.parametrize("name,params", RULE_SPECS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(RULE_SPECS)])
def test_generic_induced_equals_closed_form(name, params):
    for vocab, (p, q) in STACKED.items():
        rule, ctx = build(name, params, p.shape[0], vocab, seed=vocab)
        closed = rule.induced(p, q, ctx)
        generic = generic_induced(rule, p, q, ctx)
        assert_rows_close(generic, closed.numpy())
        assert_distribution(closed)
        assert_distribution(rule.residual(p, q, ctx))
        assert_distribution(rule.bonus(p, ctx))
        x = torch.multinomial(q, 1, generator=torch.Generator().manual_seed(vocab)).squeeze(-1)
        h = rule.acceptance(p, q, x, ctx)
        assert h.shape == (p.shape[0],) and (h >= 0).all() and (h <= 1).all()


def test_generic_induced_greedy_shapes():
    """One-hot p, q with the softmax shapes in the context (the greedy decoder's call)."""
    rng = np.random.default_rng(5)
    vocab, k = 6, 12
    shape = _t([_dirichlet(rng, vocab, 0.5) for _ in range(k)])
    q_shape = _t([_dirichlet(rng, vocab, 0.5) for _ in range(k)])
    p = torch.nn.functional.one_hot(shape.argmax(-1), vocab).to(DTYPE)
    q = torch.nn.functional.one_hot(q_shape.argmax(-1), vocab).to(DTYPE)
    q[:3] = p[:3]  # some agreeing rows
    for name, params in RULE_SPECS:
        rule, ctx = build(name, params, k, vocab)
        ctx.p_shape, ctx.q_shape = shape, q_shape
        closed = rule.induced(p, q, ctx)
        assert_rows_close(generic_induced(rule, p, q, ctx), closed.numpy())
        assert_distribution(closed)


# ----------------------------------------------------------------------------------------------------------
# 3. Monte Carlo through verify_block.

# A position where every relaxation matters: tokens 0, 1, 4 are underestimated by the draft, 2, 3, 5 are
# overshoots; with l = 0.5, token 2 is a moderate overshoot (kept), 3 and 5 exceed p/l (capped); min-p with
# p_base = 0.3 and eta with (0.05, 0.9) cut some tokens.
MC_P = np.array([0.30, 0.25, 0.20, 0.15, 0.07, 0.03])
MC_Q = np.array([0.10, 0.05, 0.30, 0.35, 0.02, 0.18])
MC_BONUS = np.array([0.05, 0.40, 0.02, 0.30, 0.08, 0.15])  # p at the position after the block
N_DRAWS = 20_000


def _batched(t, n):
    """A one-sequence context field repeated for n sequences ([rows, ...] -> [n, rows, ...])."""
    return None if t is None else t.unsqueeze(0).expand(n, *t.shape)


def emitted_tokens(rule, p_rows, q_row, ctx, n, seed, position=0):
    """n independent k = 1 blocks with x ~ q, decided at once by the batched verifier the decoder runs
    (:func:`judgekit.decode.verify.verify_batch`; tests/test_fastpath.py checks that it makes the same draws as
    a written-out one-block verifier). Returns the emitted token at `position` (0: x if accepted else the
    residual sample; 1: the bonus token, only defined after an acceptance) and the accepted lengths."""
    p = _t(p_rows)
    q = _t(q_row).unsqueeze(0)
    draft_gen = torch.Generator().manual_seed(seed)
    x = torch.multinomial(q[0], n, replacement=True, generator=draft_gen).unsqueeze(1)
    bctx = RuleContext(_batched(ctx.p_shape, n), _batched(ctx.q_shape, n), _batched(ctx.hidden, n))
    n_acc, nxt = verify_batch(rule, _batched(p, n), _batched(q, n), x, bctx,
                              generator=torch.Generator().manual_seed(seed + 1))
    n_acc, nxt = n_acc.numpy(), nxt.numpy()
    if position == 0:
        return np.where(n_acc == 1, x[:, 0].numpy(), nxt), n_acc
    return nxt, n_acc


def mc_rule(name):
    vocab = len(MC_P)
    if name == "judge":
        j = torch.tensor([[False, True, True, False, False, True]])  # keep overshoots 2 and 5, not 3
        table = torch.where(j, 0.1, 0.9).to(DTYPE)
        rule = make_rule("judge", judge=table_judge(table), threshold=0.5)
        return rule, RuleContext(hidden=torch.zeros(1, 4, dtype=DTYPE), judge_vocab=j)
    params = {
        "lossless": {},
        "lenience": {"lenience": 0.5},
        "cos": {"lam": 0.4},
        "cos-adaptive": {"lam": 0.4},
        "cos-ceiling": {"lam": 0.4},
        "cos-ceiling-rescaled": {"lam": 0.4},
        "fuzzy": {"threshold": 0.5, "divergence": "tv"},  # TV(p, q) = 0.45 < 0.5: gate open, P = q
        "speccascade": {"p_base": 0.3},
        "typical": {"epsilon": 0.05, "delta": 0.9},
        "minp": {"p_base": 0.3},
        "eta": {"epsilon": 0.05, "delta": 0.9},
    }[name]
    assert vocab == 6
    return make_rule(name, **params), RuleContext()


MC_RULES = ["lossless", "lenience", "cos", "cos-adaptive", "cos-ceiling", "cos-ceiling-rescaled", "fuzzy", "judge",
            "speccascade", "typical", "minp", "eta"]


def _mc_reference(name):
    """The expected distribution from the paper's references (so MC checks the paper, not just induced)."""
    p, q = MC_P, MC_Q
    return {
        "lossless": ref_lossless(p, q),
        "lenience": ref_lenience(p, q, 0.5),
        "cos": ref_cos(p, q, 0.4),
        "cos-adaptive": ref_cos_adaptive(p, q, 0.4),
        "cos-ceiling": ref_cos_ceiling(p, q, 0.4),
        "cos-ceiling-rescaled": ref_cos_ceiling_rescaled(p, q, 0.4),
        "fuzzy": ref_fuzzy(p, q, 0.5, "tv"),
        "judge": ref_judge(p, q, np.array([0, 1, 1, 0, 0, 1.0])),
        "speccascade": ref_truncation_verify(p, q, ref_minp_set(p, 0.3)),
        "typical": ref_truncation_verify(p, q, ref_eta_set(p, 0.05, 0.9)),
        "minp": ref_truncated(p, ref_minp_set(p, 0.3)),
        "eta": ref_truncated(p, ref_eta_set(p, 0.05, 0.9)),
    }[name]


def test_mc_position_makes_rules_differ():
    """The chosen (p, q) separates the rules' induced distributions (else MC would prove little)."""
    refs = {n: _mc_reference(n) for n in MC_RULES}
    assert ref_minp_set(MC_P, 0.3).sum() == 4 and ref_eta_set(MC_P, 0.05, 0.9).sum() == 5
    distinct = {n for n in MC_RULES if 0.5 * np.abs(refs[n] - MC_P).sum() > 0.03}
    assert distinct == set(MC_RULES) - {"lossless"}
    # the ablations are told apart from their parents at this position
    for name in ("cos-adaptive", "cos-ceiling", "cos-ceiling-rescaled"):
        for parent in ("cos", "lenience"):
            assert 0.5 * np.abs(refs[name] - refs[parent]).sum() > 0.03, (name, parent)
    # and the two readings of the ceiling column are told apart (the planted mistake below relies on it)
    assert 0.5 * np.abs(refs["cos-ceiling"] - refs["cos-ceiling-rescaled"]).sum() > 0.025


@pytest.mark.parametrize("name", MC_RULES)
def test_verify_block_first_token_matches_induced(name):
    rule, ctx = mc_rule(name)
    induced = rule.induced(_t(MC_P).unsqueeze(0), _t(MC_Q).unsqueeze(0), ctx)[0].numpy()
    np.testing.assert_allclose(induced, _mc_reference(name), atol=1e-12)
    seed = 1000 + MC_RULES.index(name)
    tokens, _ = emitted_tokens(rule, [MC_P, MC_BONUS], MC_Q, ctx, N_DRAWS, seed)
    counts = np.bincount(tokens, minlength=len(MC_P))
    stat, chi_bound, l1, l1_bound = gof(counts, induced)
    print(f"{name}: chi2 = {stat:.1f} vs {chi_bound:.1f}; L1 = {l1:.4f} vs {l1_bound:.4f}")
    assert stat < chi_bound, f"{name}: chi2 {stat:.1f} >= {chi_bound:.1f}; counts {counts}, expected {induced}"
    assert l1 < l1_bound, f"{name}: L1 {l1:.4f} >= {l1_bound:.4f}"


def test_verify_block_truncation_zero_mass_case():
    """SpecCascade where the draft has no mass on A: every draft token is rejected, p_Theta is emitted."""
    rule = make_rule("speccascade", p_base=0.3)
    q = np.array([0.0, 0.0, 0.0, 0.0, 0.4, 0.6])
    tokens, n_acc = emitted_tokens(rule, [MC_P, MC_BONUS], q, RuleContext(), 5_000, 77)
    assert (n_acc == 0).all()
    induced = rule.induced(_t(MC_P).unsqueeze(0), _t(q).unsqueeze(0), RuleContext())[0].numpy()
    np.testing.assert_allclose(induced, ref_truncated(MC_P, ref_minp_set(MC_P, 0.3)), atol=1e-12)
    stat, chi_bound, l1, l1_bound = gof(np.bincount(tokens, minlength=6), induced)
    assert stat < chi_bound and l1 < l1_bound


# (the property "never outside A" is checked for every truncation rule and both shapes further below; these
# check the bonus token's whole distribution)
BONUS_CASES = [("lossless", False), ("minp", False), ("minp", True), ("speccascade", True), ("typical", False)]


def _bonus_reference(name):
    if name == "lossless":
        return MC_BONUS
    if name in ("minp", "speccascade"):
        return ref_truncated(MC_BONUS, ref_minp_set(MC_BONUS, 0.3))
    return ref_truncated(MC_BONUS, ref_eta_set(MC_BONUS, 0.05, 0.9))


@pytest.mark.parametrize("name,with_shape", BONUS_CASES)
def test_verify_block_bonus_token(name, with_shape):
    """k = 1 with x certainly accepted (p[0] = q): the second emitted token follows rule.bonus(p[1:]).

    with_shape: ctx.p_shape holds the k + 1 target rows (as the decoder passes it); the bonus's min-p set
    must come from the bonus row's shape, not from the drafted row's (whose set here is {0, 1, 2, 3},
    against {1, 3, 5} for the bonus row)."""
    rule, ctx = mc_rule(name)
    # a first position where every draft token is accepted and stays inside the min-p set
    first = np.array([0.3, 0.25, 0.25, 0.2, 0.0, 0.0])
    if with_shape:
        ctx = RuleContext(p_shape=_t([first, MC_BONUS]))
    tokens, n_acc = emitted_tokens(rule, [first, MC_BONUS], first, ctx, 10_000, 4242, position=1)
    assert (n_acc == 1).all()
    bonus = rule.bonus(_t(MC_BONUS).unsqueeze(0), RuleContext())[0].numpy()
    want = _bonus_reference(name)
    np.testing.assert_allclose(bonus, want, atol=1e-12)
    if name != "lossless":  # the bonus row's allowed set is a strict subset: tokens outside it never appear
        assert (want == 0).any() and not np.isin(tokens, np.flatnonzero(want == 0)).any()
    stat, chi_bound, l1, l1_bound = gof(np.bincount(tokens, minlength=6), bonus)
    assert stat < chi_bound and l1 < l1_bound, (stat, chi_bound, l1, l1_bound)


@pytest.mark.parametrize("with_shape", [False, True], ids=["no-shape", "p-shape"])
@pytest.mark.parametrize("name,params", [("speccascade", {"p_base": 0.3}), ("typical", {"epsilon": 0.05, "delta": 0.9}),
                                         ("minp", {"p_base": 0.3}), ("eta", {"epsilon": 0.05, "delta": 0.9})])
def test_truncation_rules_never_emit_outside_allowed_set(name, params, with_shape):
    """Definition 1: every emitted token (accepted drafts, residual samples and the bonus token after a full
    block) lies in the allowed set A of its own position. k = 3 blocks with drafts x ~ q whose rows put
    much mass outside A, many draws; the bonus path is taken often (checked) because q is concentrated on
    tokens inside A at some rows."""
    rule = make_rule(name, **params)
    rng = np.random.default_rng(17)
    k, vocab, draws = 3, 8, 3000
    allowed_fn = (lambda r: ref_minp_set(r, params["p_base"])) if "p_base" in params else \
        (lambda r: ref_eta_set(r, params["epsilon"], params["delta"]))
    gen = torch.Generator().manual_seed(5)
    bonus_seen = outside = excluded = 0
    for _ in range(draws // 50):
        p_rows = np.stack([_dirichlet(rng, vocab, 0.4) for _ in range(k + 1)])
        sets = np.stack([allowed_fn(r) for r in p_rows])
        # draft rows: 85 % inside A (so whole blocks get accepted), 15 % spread over the whole vocabulary
        inside = sets[:k] / sets[:k].sum(-1, keepdims=True)
        q_rows = 0.85 * inside + 0.15 / vocab
        p, q = _t(p_rows), _t(q_rows)
        ctx = RuleContext(p_shape=_batched(p, 50) if with_shape else None)
        x = torch.multinomial(q, 50, replacement=True, generator=gen).T  # 50 blocks [50, k], x_i ~ q_i
        ns, nexts = verify_batch(rule, _batched(p, 50), _batched(q, 50), x, ctx, generator=gen)
        for row, n, nxt in zip(x.tolist(), ns.tolist(), nexts.tolist()):
            emitted = [(i, row[i]) for i in range(n)] + [(n, nxt)]
            outside += sum(not sets[i][t] for i, t in emitted)
            bonus_seen += n == k
        excluded += int((~sets).sum())
    assert excluded > 0  # the allowed sets really exclude tokens
    assert outside == 0
    assert bonus_seen > 100


# ----------------------------------------------------------------------------------------------------------
# 4. Planted mistakes are rejected by the same check.


class WrongResidualLossless(Lossless):
    """Resamples from p itself on rejection instead of norm((p - q)+)."""

    def residual(self, p, q, ctx):
        return p


class WrongCapLenience(Lenience):
    """Caps at p / sqrt(l) instead of p / l (a plausible typo), keeping eq. 10's closed form for l."""

    def acceptance(self, p, q, x, ctx):
        px, qx = p.gather(-1, x.unsqueeze(-1)).squeeze(-1), q.gather(-1, x.unsqueeze(-1)).squeeze(-1)
        return (px / math.sqrt(self.lenience) / qx).clamp(max=1.0)


class WrongResidualCoS(CoS):
    """A subtle mistake: 20% of q leaks into the residual (TV to the right output only ~0.03)."""

    def residual(self, p, q, ctx):
        base = super().residual(p, q, ctx)
        return 0.8 * base + 0.2 * q


class RescaledCoSCeiling(CoSCeiling):
    """The rescaled mechanism (verify against f / sum f) claiming the capped closed form: the readings
    differ by TV ~0.03 at the MC position, so mistaking one for the other must be caught."""

    def acceptance(self, p, q, x, ctx):
        return CoSCeilingRescaled.acceptance(self, p, q, x, ctx)

    def residual(self, p, q, ctx):
        return CoSCeilingRescaled.residual(self, p, q, ctx)


PLANTED = [  # (label, rule, seed offset, draws): the gross mistakes need fewer draws to be caught
    ("wrong-residual-lossless", WrongResidualLossless(), 0, 10_000),
    ("wrong-cap-lenience", WrongCapLenience(lenience=0.5), 1, 10_000),
    ("mixed-residual-cos", WrongResidualCoS(lam=0.4), 2, N_DRAWS),
    ("rescaled-as-capped-cos-ceiling", RescaledCoSCeiling(lam=0.4), 3, 3 * N_DRAWS),
]


@pytest.mark.parametrize("label,rule,idx,draws", PLANTED, ids=[x[0] for x in PLANTED])
def test_planted_mistake_is_rejected(label, rule, idx, draws):
    ctx = RuleContext()
    p, q = _t(MC_P).unsqueeze(0), _t(MC_Q).unsqueeze(0)
    induced = rule.induced(p, q, ctx)[0].numpy()
    wrong = generic_induced(rule, p, q, ctx)[0].numpy()
    tv = 0.5 * np.abs(wrong - induced).sum()
    assert tv > 0.005  # the mistake really changes what is emitted
    tokens, _ = emitted_tokens(rule, [MC_P, MC_BONUS], MC_Q, ctx, draws, 9000 + idx)
    counts = np.bincount(tokens, minlength=len(MC_P))
    stat, chi_bound, l1, l1_bound = gof(counts, induced)
    print(f"{label}: TV(wrong, induced) = {tv:.4f}; chi2 = {stat:.1f} vs bound {chi_bound:.1f}; "
          f"L1 = {l1:.4f} vs bound {l1_bound:.4f}")
    assert stat > chi_bound, f"{label}: the planted mistake was not detected (chi2 {stat:.1f})"
    assert l1 > l1_bound, f"{label}: the planted mistake was not detected (L1 {l1:.4f})"
    # and the samples do follow the (wrong) distribution actually implemented
    stat_w, chi_bound_w, _, _ = gof(counts, wrong)
    assert stat_w < chi_bound_w


# ----------------------------------------------------------------------------------------------------------
# 5. Greedy decoding (one-hot p and q).


def _oh(vocab, i):
    return torch.nn.functional.one_hot(torch.tensor([i]), vocab).to(DTYPE)


def _greedy_step(rule, ctx, vocab, a, b, bonus_token=0, seed=0):
    """Target argmax a, draft token b (q one-hot at b); returns (n_accepted, next_token).
    ctx.p_shape, when given, holds the k + 1 = 2 target rows."""
    p = torch.cat([_oh(vocab, a), _oh(vocab, bonus_token)], 0)
    res = verify_block(rule, p, _oh(vocab, b), torch.tensor([b]), ctx, torch.Generator().manual_seed(seed))
    return int(res.n_accepted), int(res.next_token)


def test_greedy_lossless():
    vocab = 6
    rule = make_rule("lossless")
    for a in range(vocab):
        for b in range(vocab):
            for seed in range(3):
                n, nxt = _greedy_step(rule, RuleContext(), vocab, a, b, bonus_token=(a + 2) % vocab, seed=seed)
                if a == b:
                    assert n == 1 and nxt == (a + 2) % vocab
                else:
                    assert n == 0 and nxt == a


def test_greedy_judge():
    vocab = 6
    g = torch.Generator().manual_seed(3)
    for trial in range(4):
        j = torch.rand(1, vocab, generator=g) < 0.5
        table = torch.where(j, 0.1, 0.9).to(DTYPE)
        rule = make_rule("judge", judge=table_judge(table), threshold=0.5)
        ctx = RuleContext(hidden=torch.zeros(1, 2, dtype=DTYPE))
        for a in range(vocab):
            for b in range(vocab):
                n, nxt = _greedy_step(rule, ctx, vocab, a, b, seed=trial)
                if a == b or bool(j[0, b]):
                    assert n == 1, (a, b, j)
                else:
                    assert n == 0 and nxt == a, (a, b, j)


def test_greedy_speccascade_reads_softmax_shape():
    vocab, p_base = 8, 0.3
    rule = make_rule("speccascade", p_base=p_base)
    g = torch.Generator().manual_seed(11)
    sizes = set()
    for trial in range(8):
        logits = torch.randn(1, vocab, generator=g, dtype=DTYPE) * 1.5
        shape = torch.softmax(logits, -1)
        a = int(shape.argmax())
        allowed = (shape[0] >= p_base * shape[0].max()).numpy()
        sizes.add(int(allowed.sum()))
        bonus_shape = torch.softmax(torch.randn(1, vocab, generator=g, dtype=DTYPE), -1)
        ctx = RuleContext(p_shape=torch.cat([shape, bonus_shape], 0))
        for b in range(vocab):
            n, nxt = _greedy_step(rule, ctx, vocab, a, b, bonus_token=int(bonus_shape.argmax()), seed=trial)
            if allowed[b]:
                assert n == 1
            else:
                assert n == 0 and nxt == a
    assert max(sizes) > 1  # some sets hold tokens other than the argmax


def test_cos_lambda_one_is_lossless():
    cos, lossless = make_rule("cos", lam=1.0), make_rule("lossless")
    for vocab, (p, q) in STACKED.items():
        ctx = RuleContext()
        x = torch.multinomial(q, 1, generator=torch.Generator().manual_seed(vocab)).squeeze(-1)
        assert_rows_close(cos.acceptance(p, q, x, ctx), lossless.acceptance(p, q, x, ctx).numpy())
        assert_rows_close(cos.residual(p, q, ctx), lossless.residual(p, q, ctx).numpy())
        assert_rows_close(cos.induced(p, q, ctx), p.numpy())
    for a in range(5):
        for b in range(5):
            assert _greedy_step(cos, RuleContext(), 5, a, b) == _greedy_step(lossless, RuleContext(), 5, a, b)


# ----------------------------------------------------------------------------------------------------------
# 6. Parameter validation.


def _judge_fn(hidden, tokens):
    return torch.zeros(tokens.shape[0])


@pytest.mark.parametrize(
    "name,params",
    [
        ("lenience", {"lenience": 0.0}),
        ("lenience", {"lenience": -0.5}),
        ("lenience", {"lenience": 1.5}),
        ("lenience", {"lenience": float("nan")}),
        ("cos", {"lam": -0.1}),
        ("cos", {"lam": 1.1}),
        ("cos", {"lam": float("nan")}),
        ("cos-adaptive", {"lam": 0.0}),
        ("cos-adaptive", {"lam": 1.1}),
        ("cos-ceiling", {"lam": 0.0}),
        ("cos-ceiling", {"lam": float("nan")}),
        ("cos-ceiling-rescaled", {"lam": 0.0}),
        ("cos-ceiling-rescaled", {"lam": 1.5}),
        ("speccascade", {"p_base": 0.0}),
        ("speccascade", {"p_base": 1.0}),
        ("minp", {"p_base": -0.2}),
        ("minp", {"p_base": 1.0}),
        ("judge", {}),
        ("judge", {"judge": None, "threshold": 0.5}),
        ("judge", {"judge": _judge_fn, "threshold": 1.5}),
        ("fuzzy", {"threshold": 0.1, "divergence": "hellinger"}),
        ("fuzzy", {"threshold": -1.0}),
        ("fuzzy", {"threshold": float("nan")}),
        ("typical", {"epsilon": 0.0}),
        ("eta", {"epsilon": 0.1, "delta": 0.0}),
        ("nosuchrule", {}),
    ],
)
def test_invalid_parameters_raise(name, params):
    with pytest.raises(JudgekitError):
        make_rule(name, **params)


@pytest.mark.parametrize(
    "name,params",
    [
        ("lenience", {"lenience": 1.0}),
        ("lenience", {"lenience": 1e-3}),
        ("cos", {"lam": 0.0}),
        ("cos", {"lam": 1.0}),
        ("minp", {"p_base": 0.5}),
        ("judge", {"judge": _judge_fn, "threshold": 0.0}),
        ("fuzzy", {"threshold": 0.0, "divergence": "js"}),
    ],
)
def test_boundary_parameters_behave_as_their_limits(name, params):
    """Each boundary value is accepted and the rule's own mechanism (generic_induced) emits the limit's
    distribution: l = 1 and lam = 1 lossless, lam = 0 the draft's q, threshold 0 lossless. A rule that
    mishandled the boundary fails here: a judge keeping tokens at P(important) = 0 <= 0 does (checked by
    planting it). For fuzzy, a gate D <= 0 would open only where p = q, which emits the same tokens."""
    rule = make_rule(name, **params)
    assert isinstance(rule, Rule)
    for vocab, (p, q) in STACKED.items():
        ctx = RuleContext()
        if name == "judge":
            ctx = RuleContext(hidden=torch.zeros(p.shape[0], 2, dtype=DTYPE),
                              judge_vocab=torch.zeros(p.shape[0], vocab, dtype=torch.bool))
        got = generic_induced(rule, p, q, ctx)
        pn, qn = p.numpy(), q.numpy()
        if (name, params.get("lenience", params.get("lam"))) in {("lenience", 1.0), ("cos", 1.0)} or \
                name in ("judge", "fuzzy"):
            # l = 1 and lam = 1 are lossless; threshold 0: no judge score is < 0, no divergence is < 0
            want = pn
        elif name == "cos":  # lam = 0: every draft token is accepted, P = q
            want = qn
            assert (_all_tokens(rule, p, q, ctx).numpy()[qn > 0] == 1.0).all()
        elif name == "lenience":  # l = 1e-3: eq. 10 with its tiny l
            want = np.array([ref_lenience(a, b, 1e-3) for a, b in zip(pn, qn)])
        else:  # minp p_base = 0.5: p restricted to tokens within half of the top probability
            want = np.array([ref_truncated(a, ref_minp_set(a, 0.5)) for a in pn])
        assert_rows_close(got, want)


def test_divergence_validation_direct():
    from judgekit.decode.rules import divergence

    with pytest.raises(JudgekitError):
        divergence(_t([[0.5, 0.5]]), _t([[0.5, 0.5]]), "hellinger")


# ----------------------------------------------------------------------------------------------------------
# 7. Leading-run semantics on k > 1 blocks.

LEAD_RULES = [
    ("lossless", {}),
    ("lenience", {"lenience": 0.5}),
    ("cos", {"lam": 1.0}),  # with lam < 1 a rejection is never certain (nu >= (1 - lam) q)
    ("cos-adaptive", {"lam": 1.0}),  # likewise: its over-region keeps (1 - lam) q
    ("cos-ceiling", {"lam": 0.5}),  # a disjoint one-hot draft exceeds the ceiling p / lam = 0: rejected
    ("fuzzy", {"threshold": 0.1, "divergence": "kl"}),
    ("judge", {}),
    ("speccascade", {"p_base": 0.3}),
    ("typical", {"epsilon": 0.05, "delta": 0.9}),
    ("minp", {"p_base": 0.3}),
    ("eta", {"epsilon": 0.05, "delta": 0.9}),
]


@pytest.mark.parametrize("with_shape", [False, True], ids=["no-shape", "p-shape"])
@pytest.mark.parametrize("name,params", LEAD_RULES, ids=[n for n, _ in LEAD_RULES])
def test_leading_run(name, params, with_shape):
    """Every accept/reject pattern over k = 4 positions: n_accepted is the first rejection index (not the
    number of accepted positions) and next_token is that position's residual token, or the bonus token.
    with_shape: ctx.p_shape = p with its k + 1 rows, as the decoder passes it in sampling mode."""
    k, vocab = 4, 10
    drafts = [1, 2, 3, 4]
    targets = [5, 6, 7, 8]  # where each rejected position's target mass sits (distinct per position)
    bonus_token = 9
    if name == "judge":
        table = torch.full((k, vocab), 0.9, dtype=DTYPE)  # everything important: j = 0
        rule = make_rule("judge", judge=table_judge(table), threshold=0.5)
        ctx = RuleContext(hidden=torch.arange(k, dtype=DTYPE).unsqueeze(1))
    else:
        rule, ctx = make_rule(name, **params), RuleContext()
    gen = torch.Generator().manual_seed(0)
    for pattern in range(2 ** k):
        accept = [(pattern >> i) & 1 == 1 for i in range(k)]
        p = torch.zeros(k + 1, vocab, dtype=DTYPE)
        q = torch.zeros(k, vocab, dtype=DTYPE)
        for i in range(k):
            q[i, drafts[i]] = 1.0
            p[i, drafts[i] if accept[i] else targets[i]] = 1.0  # p = q: certain accept; disjoint: certain reject
        p[k, bonus_token] = 1.0
        x = torch.tensor(drafts)
        if with_shape:
            ctx.p_shape = p
        h = rule.acceptance(p[:k], q, x, ctx.target_rows(slice(0, k)) if with_shape else ctx)
        assert h.tolist() == [1.0 if a else 0.0 for a in accept]
        first_reject = next((i for i in range(k) if not accept[i]), k)
        for _ in range(2):
            res = verify_block(rule, p, q, x, ctx, gen)
            assert int(res.n_accepted) == first_reject, (pattern, accept)
            want = targets[first_reject] if first_reject < k else bonus_token
            assert int(res.next_token) == want, (pattern, accept)


def test_leading_run_random_acceptance_statistics():
    """With h = 1/2 at every position, n_accepted is geometric truncated at k (leading run, not a sum)."""
    k, n = 3, 4000
    rule = make_rule("lossless")
    # q puts 2/3 on token 0 where p has 1/3: h(0) = 1/2
    q = _t([[2 / 3, 1 / 3, 0, 0]] * k)
    p = _t([[1 / 3, 1 / 3, 1 / 3, 0]] * (k + 1))
    x = torch.zeros(k, dtype=torch.long)
    gen = torch.Generator().manual_seed(123)
    counts = np.zeros(k + 1)
    for _ in range(n):
        counts[int(verify_block(rule, p, q, x, RuleContext(), gen).n_accepted)] += 1
    expected = np.array([0.5, 0.25, 0.125, 0.125])
    stat, chi_bound, l1, l1_bound = gof(counts, expected)
    assert stat < chi_bound and l1 < l1_bound


def test_empty_block_emits_bonus():
    rule = make_rule("lossless")
    p = _oh(5, 3)
    res = verify_block(rule, p, torch.zeros(0, 5, dtype=DTYPE), torch.zeros(0, dtype=torch.long), RuleContext())
    assert int(res.n_accepted) == 0 and int(res.next_token) == 3
