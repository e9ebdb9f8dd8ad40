"""Tree verification (judgekit.decode.tree_verify): Monte Carlo exactness, closed forms, greedy, judge, limits.

The Monte Carlo checks draw N >= 100,000 trees at once through :func:`verify_tree` (one batched call) and use
the bounds of tests/stat_checks.py at a 1e-6 false-alarm level: Pearson's chi-square against its exact
quantile and the Bretagnolle-Huber-Carol L1 bound. Two checks:

* the first emitted token of a depth-1 tree (siblings >= 2) against p / p_A (``gof``);
* every verification decision along the paths of a deeper tree ("3,2"), pooled by *context*: each node the
  path reaches (the root, and every accepted node) emits one token — its accepted child or the residual or
  bonus sample — and given the node that token must follow the node's own law (p, p_A, or the closed form).
  The Pearson statistic is summed over contexts with its degrees of freedom summed too.

Planted mistakes (a lossless residual that forgets the rejected sibling, a baseline residual that forgets to
renormalise the truncated target, sampled siblings without the without-replacement correction) are shown to
be rejected by the same checks.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from stat_checks import chi2_quantile, gof, ALPHA

import judgekit.decode.tree_verify as tv
from judgekit.decode.rules import MinP, Lossless, RuleContext, make_rule, _normalise
from judgekit.decode.tree import parse_tree
from judgekit.decode.tree_verify import tree_induced, verify_tree
from judgekit.errors import JudgekitError

DTYPE = torch.float64
V = 6
N_DRAWS = 100_000
# a position where the sibling rule matters: the draft over-weights 2, 3, 5; min-p(0.3) keeps {0, 1, 2, 3}
P0 = np.array([0.30, 0.25, 0.20, 0.15, 0.07, 0.03])
Q0 = np.array([0.10, 0.05, 0.30, 0.35, 0.02, 0.18])
RULES = {"lossless": {}, "minp": {"p_base": 0.3}, "eta": {"epsilon": 0.05, "delta": 0.9},
         "speccascade": {"p_base": 0.3}, "typical": {"epsilon": 0.05, "delta": 0.9}}


def _t(a):
    return torch.as_tensor(np.asarray(a), dtype=DTYPE)


def _rows(seed):
    """Target and draft rows for the nodes below the root: row v is the law after token v (a Markov chain)."""
    rng = np.random.default_rng(seed)
    p1 = rng.dirichlet(np.full(V, 0.8), size=V)
    q1 = 0.5 * p1 + 0.5 * rng.dirichlet(np.full(V, 0.8), size=V)
    return p1, q1


def draft_tree(spec, p0, q0, p1, q1, n, proposal, gen):
    """n trees of one shape, drafted from q (top-k siblings, or draws without replacement via Gumbel-top-k),
    with the target/draft rows of every node: the root's are p0/q0, a node holding token v has p1[v]/q1[v]."""
    tree = parse_tree(spec).tensors()
    tokens = torch.zeros(n, tree.n, dtype=torch.long)
    q_rows = torch.empty(n, tree.n, V, dtype=DTYPE)
    p_rows = torch.empty(n, tree.n, V, dtype=DTYPE)
    p_rows[:, 0], q_rows[:, 0] = _t(p0), _t(q0)
    for node in range(tree.n):  # parents come first, so each node's children are drafted from its own row
        kids = tree.children[node][tree.children[node] >= 0]
        if node > 0:
            tok = tokens[:, node]
            p_rows[:, node], q_rows[:, node] = _t(p1)[tok], _t(q1)[tok]
        if len(kids) == 0:
            continue
        q = q_rows[:, node]
        if proposal == "topk":
            picked = q.topk(len(kids), dim=1).indices
        else:
            gumbel = -torch.log(torch.empty_like(q).exponential_(generator=gen))
            picked = (q.log() + gumbel).topk(len(kids), dim=1).indices
        tokens[:, kids] = picked
    return tree, tokens, p_rows, q_rows


def run_tree(rule, spec, proposal, n, seed, p0=P0, q0=Q0, rows=None):
    p1, q1 = rows if rows is not None else _rows(seed)
    gen = torch.Generator().manual_seed(seed)
    tree, tokens, p, q = draft_tree(spec, p0, q0, p1, q1, n, proposal, gen)
    res = verify_tree(rule, tree, tokens, p, RuleContext(), q=q, proposal=proposal, generator=gen)
    return tree, tokens, p, q, res


def first_token(res):
    return torch.where(res.length > 0, res.tokens[:, 0], res.next_token).numpy()


def context_emissions(tree, tokens, res):
    """(depth, token, emitted token) for every node each path reaches: the root and the accepted nodes;
    what a node emits is its accepted child's token or, at the end of the path, the next token. In these
    test worlds a node's target and draft rows depend only on its token (and the root's are P0/Q0), and all
    nodes of one depth have the same number of children, so (depth, token) fixes the law of the emission."""
    out = []
    path, length = res.path.numpy(), res.length.numpy()
    toks, nxt = tokens.numpy(), res.next_token.numpy()
    for d in range(path.shape[1]):
        rows = np.flatnonzero(length >= d)
        node = path[rows, d]
        child = path[rows, d + 1] if d + 1 < path.shape[1] else np.full(len(rows), -1)
        emitted = np.where(child >= 0, toks[rows, np.clip(child, 0, None)], nxt[rows])
        out.append(np.stack([np.full(len(rows), d), toks[rows, node], emitted], 1))
    return np.concatenate(out)


MIN_VISITS = 200  # contexts reached fewer times are left out (Pearson's approximation needs counts)


def pooled_gof(emissions, expected_fn):
    """Pearson's statistic summed over the contexts (depth, token), against the chi-square bound with the
    summed degrees of freedom; also the largest per-context L1 distance relative to its own BHC bound."""
    stat, dof, worst, used = 0.0, 0, 0.0, 0
    keys = {(int(a), int(b)) for a, b in emissions[:, :2]}
    for depth, token in sorted(keys):
        sel = emissions[(emissions[:, 0] == depth) & (emissions[:, 1] == token), 2]
        if len(sel) < MIN_VISITS:
            continue
        want = expected_fn(depth, token)
        s, _, l1, l1_bound = gof(np.bincount(sel, minlength=V), want)
        stat += s
        dof += int((want > 1e-12).sum()) - 1
        worst = max(worst, l1 / l1_bound)
        used += len(sel)
    assert used > 0.9 * len(emissions)
    return stat, chi2_quantile(ALPHA, max(dof, 1)), worst


def _truncated(rule, p):
    return rule._truncated(_t(p)[None], RuleContext())[0].numpy() if rule.name != "lossless" else np.asarray(p)


# ----------------------------------------------------------------------------------------------------------
# 1. Lossless and truncation sampling + SD emit p / p_A exactly, on both sibling laws


@pytest.mark.parametrize("proposal", ["topk", "sample"])
@pytest.mark.parametrize("name", ["lossless", "minp", "eta"])
def test_first_token_is_target(name, proposal):
    """Depth-1 tree with 3 siblings: the emitted token follows p (lossless) or p_A (matched baselines)."""
    rule = make_rule(name, **RULES[name])
    _, _, _, _, res = run_tree(rule, "3", proposal, N_DRAWS, 11)
    want = _truncated(rule, P0)
    stat, chi_bound, l1, l1_bound = gof(np.bincount(first_token(res), minlength=V), want)
    print(f"{name}/{proposal}: chi2 = {stat:.1f} vs {chi_bound:.1f}; L1 = {l1:.4f} vs {l1_bound:.4f}; "
          f"accepted {float((res.length > 0).double().mean()):.3f}")
    assert stat < chi_bound and l1 < l1_bound
    # the siblings really matter: more than the first one is accepted some of the time
    second = (res.path[:, 1] >= 2).double().mean()
    assert second > 0.02


@pytest.mark.parametrize("proposal", ["topk", "sample"])
@pytest.mark.parametrize("name", ["lossless", "minp"])
def test_every_decision_along_the_path_is_target(name, proposal):
    """Tree "3,2": every reached node emits from its own target row (p, or p_A), root, inner nodes and
    leaves (bonus) alike."""
    rule = make_rule(name, **RULES[name])
    p1, q1 = _rows(5)
    tree, tokens, _, _, res = run_tree(rule, "3,2", proposal, N_DRAWS, 5, rows=(p1, q1))
    assert int(res.length.max()) == 2
    em = context_emissions(tree, tokens, res)
    expected = lambda depth, tok: _truncated(rule, P0 if depth == 0 else p1[tok])  # noqa: E731
    stat, bound, worst = pooled_gof(em, expected)
    print(f"{name}/{proposal} pooled: chi2 = {stat:.1f} vs {bound:.1f}; worst L1/bound = {worst:.3f}; "
          f"{len(em)} decisions")
    assert stat < bound and worst < 1.0


def test_sampled_siblings_past_the_drafts_support_are_ignored():
    """q puts mass on two tokens only, the tree asks for three siblings: the third draw has q = 0 and is
    no sibling at all (it is never accepted and adds no residual step); the output is still p."""
    q0 = np.array([0.0, 0.0, 0.6, 0.4, 0.0, 0.0])
    _, tokens, _, _, res = run_tree(make_rule("lossless"), "3", "sample", N_DRAWS, 61, q0=q0)
    assert not np.isin(tokens[:, 3].numpy(), [2, 3]).any()  # the third sibling lies outside q's support
    assert not (res.path[:, 1] == 3).any()
    stat, chi_bound, l1, l1_bound = gof(np.bincount(first_token(res), minlength=V), P0)
    assert stat < chi_bound and l1 < l1_bound


# ----------------------------------------------------------------------------------------------------------
# 2. Closed forms (G.3) against an independent transcription and against Monte Carlo


def _ref_topk(name, p, q, m):
    """G.3 by hand: (law, acceptance) with the top-m draft tokens as siblings."""
    kids = list(np.argsort(-q, kind="stable")[:m])
    if name == "lossless":
        return p, p[kids].sum()
    rule = make_rule(name, **RULES[name])
    allowed = rule._mask(_t(p)[None], RuleContext())[0].numpy()
    p_a = np.where(allowed, p, 0) / p[allowed].sum()
    if name in ("minp", "eta"):
        return p_a, p_a[kids].sum()
    hits = [c for c in kids if allowed[c]]
    if not hits:
        return p_a, 0.0
    return np.eye(len(p))[hits[0]], 1.0


@pytest.mark.parametrize("m", [1, 2, 3, 5])
@pytest.mark.parametrize("name", list(RULES))
def test_topk_closed_form_matches_g3(name, m):
    rule = make_rule(name, **RULES[name])
    law = tree_induced(rule, _t(P0)[None], _t(Q0)[None], RuleContext(), m, "topk")
    want_law, want_acc = _ref_topk(name, P0, Q0, m)
    np.testing.assert_allclose(law.law[0].numpy(), want_law, atol=1e-12)
    np.testing.assert_allclose(float(law.acceptance[0]), want_acc, atol=1e-12)


def test_truncation_verify_topk_misses_a_then_emits_p_a():
    """No top-k sibling in A (the draft's two favourites are outside min-p's set): a = 0, the law is p_A."""
    rule = make_rule("speccascade", p_base=0.3)
    q = np.array([0.02, 0.02, 0.02, 0.02, 0.5, 0.42])
    law = tree_induced(rule, _t(P0)[None], _t(q)[None], RuleContext(), 2, "topk")
    assert float(law.acceptance[0]) == 0.0
    np.testing.assert_allclose(law.law[0].numpy(), _truncated(make_rule("minp", p_base=0.3), P0), atol=1e-12)


@pytest.mark.parametrize("proposal", ["topk", "sample"])
@pytest.mark.parametrize("name", ["speccascade", "typical"])
def test_truncation_verify_law_mc(name, proposal):
    """SpecCascade / typical on trees: top-k siblings give the point mass at the first top-k token in A;
    sampled siblings give the chain's law q / Z_A(q) (whatever the width). Checked pooled over a "3,2" tree
    against the closed form of every node (leaves: the bonus p_A)."""
    rule = make_rule(name, **RULES[name])
    p1, q1 = _rows(8)
    tree, tokens, _, _, res = run_tree(rule, "3,2", proposal, N_DRAWS, 8, rows=(p1, q1))
    widths = {0: 3, 1: 2, 2: 0}  # children per node at each depth of "3,2"

    def expected(depth, tok):
        p, q = (P0, Q0) if depth == 0 else (p1[tok], q1[tok])
        m = widths[depth]
        if m == 0:  # a leaf: the bonus token
            return rule.bonus(_t(p)[None], RuleContext())[0].numpy()
        return tree_induced(rule, _t(p)[None], _t(q)[None], RuleContext(), m, proposal).law[0].numpy()

    if proposal == "sample":  # the chain's law, independently: q restricted to A
        allowed = rule._mask(_t(P0)[None], RuleContext())[0].numpy()
        np.testing.assert_allclose(expected(0, 0), np.where(allowed, Q0, 0) / Q0[allowed].sum(), atol=1e-12)
    em = context_emissions(tree, tokens, res)
    stat, bound, worst = pooled_gof(em, expected)
    print(f"{name}/{proposal} pooled: chi2 = {stat:.1f} vs {bound:.1f}; worst L1/bound = {worst:.3f}")
    assert stat < bound and worst < 1.0


@pytest.mark.parametrize("name", list(RULES))
def test_topk_acceptance_mc(name):
    """The fraction of depth-1 trees whose root accepts a sibling is a(C) of the closed form (binomial
    bound at the same false-alarm level)."""
    rule = make_rule(name, **RULES[name])
    _, _, _, _, res = run_tree(rule, "3", "topk", N_DRAWS, 21)
    a = float(tree_induced(rule, _t(P0)[None], _t(Q0)[None], RuleContext(), 3, "topk").acceptance[0])
    rate = float((res.length > 0).double().mean())
    z = 4.892  # two-sided normal quantile at 1e-6
    assert abs(rate - a) <= z * math.sqrt(max(a * (1 - a), 1e-12) / N_DRAWS) + 1e-12, (rate, a)


def test_truncation_verify_accepts_at_least_the_baseline():
    """G.5: a(C) of SpecCascade / typical is at least that of their matched baselines, position by position."""
    rng = np.random.default_rng(3)
    p = _t(rng.dirichlet(np.full(12, 0.5), size=300))
    q = _t(rng.dirichlet(np.full(12, 0.5), size=300))
    for lossy, base in (("speccascade", "minp"), ("typical", "eta")):
        for m in (1, 2, 4):
            a = tree_induced(make_rule(lossy, **RULES[lossy]), p, q, RuleContext(), m).acceptance
            b = tree_induced(make_rule(base, **RULES[base]), p, q, RuleContext(), m).acceptance
            assert (a >= b - 1e-12).all() and (a > b + 1e-6).any()


# ----------------------------------------------------------------------------------------------------------
# 3. Planted mistakes are rejected


class ForgetfulLossless(Lossless):
    """Does not drop the rejected sibling from the target: resamples from t itself."""

    def residual(self, p, q, ctx):
        return p


class ForgetfulMinP(MinP):
    """Truncation sampling + SD that does not drop the rejected sibling: resamples from p_A itself."""

    def residual(self, p, q, ctx):
        return self._target(p, ctx)


class UntruncatedResidualMinP(MinP):
    """Reuses the lossless residual norm((t - d)+) on the untruncated target (tokens outside A can appear)."""

    def residual(self, p, q, ctx):
        return _normalise((p - q).clamp_min(0), p)


@pytest.mark.parametrize("label,rule,proposal,want", [
    ("forgetful-lossless", ForgetfulLossless(), "topk", "p"),
    ("forgetful-lossless", ForgetfulLossless(), "sample", "p"),
    ("forgetful-minp", ForgetfulMinP(p_base=0.3), "topk", "p_A"),
    ("forgetful-minp", ForgetfulMinP(p_base=0.3), "sample", "p_A"),
    ("untruncated-residual-minp", UntruncatedResidualMinP(p_base=0.3), "topk", "p_A"),
    ("untruncated-residual-minp", UntruncatedResidualMinP(p_base=0.3), "sample", "p_A"),
])
def test_planted_residual_mistake_is_rejected(label, rule, proposal, want):
    _, _, _, _, res = run_tree(rule, "3", proposal, N_DRAWS, 31)
    target = P0 if want == "p" else _truncated(make_rule("minp", p_base=0.3), P0)
    stat, chi_bound, l1, l1_bound = gof(np.bincount(first_token(res), minlength=V), target)
    print(f"{label}/{proposal}: chi2 = {stat:.1f} vs bound {chi_bound:.1f}; L1 = {l1:.4f} vs bound {l1_bound:.4f}")
    assert stat > chi_bound and l1 > l1_bound


def test_planted_missing_without_replacement_correction_is_rejected(monkeypatch):
    """Sampled siblings verified as if drawn with replacement (every sibling's law taken as q): not p."""
    monkeypatch.setattr(tv, "without", lambda d, x: d)
    _, _, _, _, res = run_tree(make_rule("lossless"), "3", "sample", N_DRAWS, 41)
    stat, chi_bound, l1, l1_bound = gof(np.bincount(first_token(res), minlength=V), P0)
    print(f"no-wor-correction: chi2 = {stat:.1f} vs bound {chi_bound:.1f}; L1 = {l1:.4f} vs bound {l1_bound:.4f}")
    assert stat > chi_bound and l1 > l1_bound


# ----------------------------------------------------------------------------------------------------------
# 4. Greedy trees, the judge, limits, generators, errors


def _one_hot(idx, vocab=V):
    return torch.nn.functional.one_hot(torch.as_tensor(idx), vocab).to(DTYPE)


def _greedy_world(spec, argmax_at, seed=0, vocab=V):
    """Random trees of distinct sibling tokens with one-hot target rows whose argmax at node n is
    argmax_at[n]; returns the tree tensors, tokens and one-hot p."""
    tree = parse_tree(spec).tensors()
    rng = np.random.default_rng(seed)
    tokens = torch.zeros(1, tree.n, dtype=torch.long)
    for node in range(tree.n):
        kids = tree.children[node][tree.children[node] >= 0]
        if len(kids):
            tokens[0, kids] = torch.as_tensor(rng.permutation(vocab)[: len(kids)])
    p = _one_hot(argmax_at).unsqueeze(0)
    return tree, tokens, p


def _greedy_reference(tree, tokens, argmax_at):
    """The target's own greedy continuation read off the tree by hand."""
    node, accepted = 0, []
    while True:
        kids = [int(c) for c in tree.children[node] if c >= 0]
        match = [c for c in kids if int(tokens[0, c]) == argmax_at[node]]
        if not match:
            return accepted, argmax_at[node]
        node = match[0]
        accepted.append(int(tokens[0, node]))


@pytest.mark.parametrize("name", list(RULES))
def test_greedy_tree_follows_target_argmax(name):
    """Greedy (one-hot p and q): every rule here accepts the sibling equal to the target's argmax (the
    truncation sets, read from the softmax shape, always hold the argmax), down to the first mismatch."""
    rule = make_rule(name, **RULES[name])
    spec = "3,2,2"
    tree = parse_tree(spec).tensors()
    for seed in range(30):
        rng = np.random.default_rng(100 + seed)
        world_tree, tokens, _ = _greedy_world(spec, [0] * tree.n, seed)
        # the argmax at each node: often one of its children's tokens, so paths of every length occur
        argmax_at = []
        for node in range(tree.n):
            kids = [int(c) for c in tree.children[node] if c >= 0]
            hit = kids and rng.random() < 0.7
            argmax_at.append(int(tokens[0, kids[rng.integers(len(kids))]]) if hit else int(rng.integers(V)))
        p = _one_hot(argmax_at).unsqueeze(0)
        shape = torch.softmax(5 * p + _t(rng.standard_normal((1, tree.n, V))) * 0.1, -1)
        ctx = RuleContext(p_shape=shape)
        res = verify_tree(rule, world_tree, tokens, p, ctx, greedy=True, generator=torch.Generator().manual_seed(seed))
        accepted, nxt = _greedy_reference(world_tree, tokens, argmax_at)
        assert res.tokens[0, : len(accepted)].tolist() == accepted and int(res.length[0]) == len(accepted)
        assert int(res.next_token[0]) == nxt


def table_judge(keep_nodes_hidden):
    """A judge reading the hidden state: P(important) = 0.1 where hidden[:, 0] (a node id) is in the set."""
    def judge(hidden, tokens, draft_hidden=None):
        ids = hidden[:, 0].round().long()
        keep = torch.isin(ids, torch.as_tensor(sorted(keep_nodes_hidden), dtype=torch.long))
        return torch.where(keep, 0.1, 0.9).to(hidden.dtype)
    return judge


def test_greedy_judge_on_tree_reads_each_siblings_hidden_state():
    """The judge keeps a mismatching sibling when its own verify position's features say unimportant; the
    first such sibling (in rank order) wins over a later exact match."""
    spec = "3,2"
    tree = parse_tree(spec).tensors()
    tokens = torch.tensor([[0, 1, 2, 3, 4, 5, 0, 1, 2, 3]])  # root's children 1, 2, 3 hold tokens 1, 2, 3
    argmax_at = [3, 5, 0, 0, 0, 0, 0, 0, 0, 0]  # node 3 (token 3) matches at the root; node 1's kids 4, 5
    p = _one_hot(argmax_at).unsqueeze(0)
    hidden = torch.arange(tree.n, dtype=DTYPE).view(1, tree.n, 1)  # hidden[node] = node id
    cases = [
        (set(), [3]),  # no verdicts: the exact match node 3 (token 3); its kids (tokens 2, 3) miss argmax 0
        ({2}, [2, 6]),  # node 2 (rank 1) is kept before the exact match at rank 2; then node 6 matches 0
        ({1, 4}, [1, 4]),  # keep node 1, then its first child node 4 (token 4) though node 5 matches 5
        ({9}, [3, 9]),  # node 3's second child (token 3, argmax 0) is kept
        ({7}, [3]),  # a verdict at a node the path never reaches changes nothing
    ]
    for keep, want_nodes in cases:
        rule = make_rule("judge", judge=table_judge(keep), threshold=0.5)
        res = verify_tree(rule, tree, tokens, p, RuleContext(hidden=hidden), greedy=True)
        got = res.path[0, 1: int(res.length[0]) + 1].tolist()
        assert got == want_nodes, (keep, got)
        assert int(res.next_token[0]) == argmax_at[got[-1]]


def test_judge_topk_closed_form_mc():
    """Sampled judge with top-k siblings: the law of the emitted token is G.3's product with kept mismatches."""
    keep_tokens = torch.tensor([False, False, True, False, False, True])
    j = keep_tokens.unsqueeze(0)

    def judge(hidden, tokens, draft_hidden=None):  # verdict by token (the closed form's judge_vocab)
        return torch.where(keep_tokens[tokens], 0.1, 0.9).to(DTYPE)
    rule = make_rule("judge", judge=judge, threshold=0.5)
    law = tree_induced(rule, _t(P0)[None], _t(Q0)[None], RuleContext(judge_vocab=j), 3, "topk").law[0].numpy()
    assert 0.5 * np.abs(law - P0).sum() > 0.05  # the kept mismatches really move the law
    gen = torch.Generator().manual_seed(51)
    tree, tokens, p, q = draft_tree("3", P0, Q0, *_rows(51), N_DRAWS, "topk", gen)
    hidden = torch.zeros(N_DRAWS, tree.n, 1, dtype=DTYPE)
    res = verify_tree(rule, tree, tokens, p, RuleContext(hidden=hidden), q=q, generator=gen)
    stat, chi_bound, l1, l1_bound = gof(np.bincount(first_token(res), minlength=V), law)
    assert stat < chi_bound and l1 < l1_bound


def test_limit_caps_depth_and_emits_bonus():
    """limit[b] = 0: nothing accepted, the root's bonus law; 1: at most one node, then that node's bonus."""
    spec = "2,2"
    tree = parse_tree(spec).tensors()
    tokens = torch.tensor([[0, 1, 2, 3, 4, 5, 0]] * 3)
    argmax_at = [1, 3, 0, 0, 0, 0, 0]  # root -> node 1 (token 1) -> node 3 (token 3) -> argmax 0
    p = _one_hot(argmax_at).unsqueeze(0).expand(3, -1, -1)
    res = verify_tree(make_rule("lossless"), tree, tokens, p, RuleContext(), limit=[0, 1, 2], greedy=True)
    assert res.length.tolist() == [0, 1, 2]
    assert res.next_token.tolist() == [1, 3, 0]
    assert res.tokens.tolist() == [[-1, -1], [1, -1], [1, 3]]


def test_per_row_generators_make_rows_independent_of_the_batch():
    rule = make_rule("lossless")
    p1, q1 = _rows(2)
    tree, tokens, p, q = draft_tree("3,2", P0, Q0, p1, q1, 6, "topk", torch.Generator().manual_seed(2))
    gens = lambda: [torch.Generator().manual_seed(70 + b) for b in range(6)]  # noqa: E731
    res = verify_tree(rule, tree, tokens, p, RuleContext(), q=q, generator=gens())
    for b in range(6):
        one = verify_tree(rule, tree, tokens[b: b + 1], p[b: b + 1], RuleContext(), q=q[b: b + 1],
                          generator=[gens()[b]])
        assert one.path[0].tolist() == res.path[b].tolist() and int(one.next_token[0]) == int(res.next_token[b])


def test_float32_target_with_float64_draft_rows():
    """p in float32 (a model's softmax) and q in float64: verification works in p's dtype."""
    tree, tokens, p, q = draft_tree("2,2", P0, Q0, *_rows(3), 8, "sample", torch.Generator().manual_seed(3))
    res = verify_tree(make_rule("lossless"), tree, tokens, p.float(), RuleContext(), q=q, proposal="sample",
                      generator=torch.Generator().manual_seed(4))
    assert res.next_token.shape == (8,) and (res.length <= 2).all()


def test_bad_calls_raise():
    tree, tokens, p, q = draft_tree("2", P0, Q0, *_rows(0), 2, "topk", torch.Generator().manual_seed(0))
    with pytest.raises(JudgekitError, match="no tree form"):
        verify_tree(make_rule("cos", lam=0.5), tree, tokens, p, RuleContext(), q=q)
    with pytest.raises(JudgekitError, match="proposal"):
        verify_tree(make_rule("lossless"), tree, tokens, p, RuleContext(), q=q, proposal="beam")
    with pytest.raises(JudgekitError, match="draft rows"):
        verify_tree(make_rule("lossless"), tree, tokens, p, RuleContext(), proposal="sample")
    with pytest.raises(JudgekitError, match="nodes"):
        verify_tree(make_rule("lossless"), tree, tokens[:, :2], p[:, :2], RuleContext(), q=q)
    with pytest.raises(JudgekitError, match="width"):
        tree_induced(make_rule("lossless"), _t(P0)[None], _t(Q0)[None], RuleContext(), 0)
