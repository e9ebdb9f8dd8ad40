"""Tests of judgekit.evaluate.analysis and `judgekit analyze` (docs/design.md §2).

The central test works one 4-token (p, q) pair through by hand: every number below is written as the
arithmetic a person does on paper, from the paper's equations, not from judgekit's code.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from judgekit.evaluate import analysis
from judgekit.cli import main
from judgekit.decode.rules import RuleContext, make_rule

torch.set_num_threads(1)

# p: target, q: draft. TV(p, q) = (0.3 + 0.05 + 0.05 + 0.3) / 2 = 0.35.
P = [0.5, 0.25, 0.15, 0.10]
Q = [0.2, 0.30, 0.10, 0.40]


def _pairs():
    return analysis.Pairs(torch.tensor([P], dtype=torch.float64), torch.tensor([Q], dtype=torch.float64), "hand")


def _kl(a, b):
    return sum(x * math.log(x / y) for x, y in zip(a, b) if x > 0)


def _tv(a, b):
    return 0.5 * sum(abs(x - y) for x, y in zip(a, b))


# Hand computation (lam = l = 0.5, p_base = 0.4 -> A = {0, 1} since 0.4 * 0.5 = 0.2; eta with epsilon = 0.12 and
# delta = 10 -> the cutoff is epsilon (delta e^-H > 1), A = {0, 1, 2}):
#
# lossless:  P = p, acceptance = sum min(p, q) = 0.2 + 0.25 + 0.1 + 0.1 = 0.65
# cos:       nu = 0.5 p + 0.5 q = [0.35, 0.275, 0.125, 0.25]; h = min(1, nu/q) = [1, 0.275/0.3, 1, 0.25/0.4]
#            acceptance = 0.2 + 0.275 + 0.1 + 0.25 = 0.825
# lenience:  p/l = [1, 0.5, 0.3, 0.2]: token 1 (0.25 < 0.3 <= 0.5) keeps q = 0.3, token 3 (0.4 > 0.2) is
#            capped at 0.2; Delta_l = sum (q - p/l)+ / TV = 0.2 / 0.35 = 4/7;
#            tokens 0, 2 (q <= p): 0.2 + 4/7 * 0.3, 0.1 + 4/7 * 0.05;
#            acceptance = sum q min(1, p/(l q)) = 0.2 + 0.3 + 0.1 + 0.2 = 0.8
# cos-ceiling-rescaled: f = [0.35, 0.275, 0.125, 0.2] (token 3: q = 0.4 > p/lam = 0.2 -> 0.2), sum f = 0.95,
#            P = f/0.95
# cos-ceiling: the same f kept where q > p (tokens 1, 3: 0.275, 0.2); rejected mass 0.025 + 0.2 = 0.225,
#            Delta_c = 0.225 / 0.35 = 9/14; tokens 0, 2: 0.2 + 9/14 * 0.3, 0.1 + 9/14 * 0.05;
#            acceptance = 0.2 + 0.275 + 0.1 + 0.2 = 0.775
# cos-adaptive: f = [0.2 + 4/7 * 0.3, 0.275, 0.1 + 4/7 * 0.05, 0.25], sum f = 1.025, P = f / 1.025
#            (both verify losslessly against P: acceptance = sum min(q, P))
# speccascade: P = q / Z_A(q) on A = [0.2, 0.3] / 0.5 = [0.4, 0.6, 0, 0]; reference p_A = [2/3, 1/3, 0, 0];
#            acceptance = q(A) = 0.5
# minp:      P = p_A, acceptance = sum min(p_A, q) = 0.2 + 0.3 = 0.5
# Lemma 1, min-p: z = 0.75; gain = min((0.3 - 0.25)+, (1/0.75 - 1) * 0.25) = min(0.05, 0.0833) = 0.05
#            (token 0 has q < p: 0); loss = min(0.15, 0.1) + min(0.1, 0.4) = 0.2; Delta BE = -0.15 = 0.5 - 0.65
# Lemma 1, eta: z = 0.9; gain = min(0.05, (1/0.9 - 1) * 0.25) = 0.25/9 = 0.02778; loss = min(0.1, 0.4) = 0.1
COS = [0.35, 0.275, 0.125, 0.25]
LEN = [0.2 + 4 / 7 * 0.3, 0.3, 0.1 + 4 / 7 * 0.05, 0.2]
CEIL = [v / 0.95 for v in (0.35, 0.275, 0.125, 0.2)]
CEIL_CAPPED = [0.2 + 9 / 14 * 0.3, 0.275, 0.1 + 9 / 14 * 0.05, 0.2]
ADAPT = [v / 1.025 for v in (0.2 + 4 / 7 * 0.3, 0.275, 0.1 + 4 / 7 * 0.05, 0.25)]
P_A = [2 / 3, 1 / 3, 0.0, 0.0]
SPEC = [0.4, 0.6, 0.0, 0.0]
HAND = {  # rule, params -> (induced, reference, acceptance)
    ("lossless", ()): (P, P, 0.65),
    ("cos", (("lam", 0.5),)): (COS, P, 0.825),
    ("lenience", (("lenience", 0.5),)): (LEN, P, 0.8),
    ("cos-ceiling", (("lam", 0.5),)): (CEIL_CAPPED, P, 0.775),
    ("cos-ceiling-rescaled", (("lam", 0.5),)): (CEIL, P, sum(min(a, b) for a, b in zip(Q, CEIL))),
    ("cos-adaptive", (("lam", 0.5),)): (ADAPT, P, sum(min(a, b) for a, b in zip(Q, ADAPT))),
    ("speccascade", (("p_base", 0.4),)): (SPEC, P_A, 0.5),
    ("minp", (("p_base", 0.4),)): (P_A, P_A, 0.5),
}


@pytest.mark.parametrize("key", list(HAND), ids=[k[0] for k in HAND])
def test_hand_computed_rule_rows(key):
    name, params = key
    induced, ref, acceptance = HAND[key]
    assert abs(sum(induced) - 1) < 1e-12
    pairs = _pairs()
    stats = analysis.rule_stats(make_rule(name, **dict(params)), pairs)
    np.testing.assert_allclose(stats.induced[0].numpy(), induced, atol=1e-12)
    row = analysis.summarise(stats, pairs)
    assert row["reference"] == ("p_A" if name in ("speccascade", "minp") else "p")
    assert row["tv"] == pytest.approx(_tv(induced, ref), abs=1e-12)
    assert row["kl"] == pytest.approx(_kl(induced, ref), abs=1e-12)
    assert row["acceptance"] == pytest.approx(acceptance, abs=1e-12)
    assert row["tv_pq"] == pytest.approx(0.35, abs=1e-12)


def test_hand_computed_values_are_what_they_say():
    """Spot checks of the hand table itself (a typo there would make the test above vacuous or wrong)."""
    assert _tv(SPEC, P_A) == pytest.approx(0.5 * ((2 / 3 - 0.4) + (0.6 - 1 / 3)))
    assert _kl(COS, P) == pytest.approx(0.35 * math.log(0.7) + 0.275 * math.log(1.1) + 0.125 * math.log(0.125 / 0.15)
                                        + 0.25 * math.log(2.5))
    assert sum(LEN) == pytest.approx(1.0)


def test_hand_computed_lemma1():
    pairs = _pairs()
    p, q = pairs.p, pairs.q
    gain, loss = analysis.lemma1_terms(p, q, torch.tensor([[True, True, False, False]]))
    assert float(gain) == pytest.approx(0.05) and float(loss) == pytest.approx(0.2)
    gain, loss = analysis.lemma1_terms(p, q, torch.tensor([[True, True, True, False]]))
    assert float(gain) == pytest.approx(0.25 / 9) and float(loss) == pytest.approx(0.1)
    rows = analysis.lemma1_sweep(pairs, [0.4], [0.12], delta=10.0)
    minp, eta = rows
    assert (minp["truncation"], minp["value"]) == ("minp", 0.4) and minp["delta_be"] == pytest.approx(-0.15)
    assert minp["delta_acceptance"] == pytest.approx(0.5 - 0.65)
    assert eta["delta_be"] == pytest.approx(0.25 / 9 - 0.1) and eta["delta_acceptance"] == pytest.approx(eta["delta_be"])
    assert eta["delta"] == 10.0


def test_lemma1_equals_acceptance_difference_on_random_pairs():
    """Lemma 1 holds on every pair: gain - loss = acceptance against p_A - acceptance against p."""
    for family in ("zipf", "dirichlet"):
        pairs = analysis.synthetic_pairs(family, 60, 30, 1.0, seed=3, sharpness=1.3)
        for row in analysis.lemma1_sweep(pairs, [0.1, 0.5, 0.9], [0.001, 0.03, 0.2]):
            assert row["delta_be"] == pytest.approx(row["delta_acceptance"], abs=1e-12)
            assert row["gain"] >= 0 and row["loss"] >= 0
            assert row["delta"] if row["truncation"] == "eta" else True
        eta = [r for r in analysis.lemma1_sweep(pairs, [], [0.04]) if r["truncation"] == "eta"][0]
        assert eta["delta"] == pytest.approx(0.2)  # sqrt(epsilon) by default


RULES = [("lossless", {}), ("lenience", {"lenience": 0.3}), ("cos", {"lam": 0.3}), ("cos-adaptive", {"lam": 0.3}),
         ("cos-ceiling", {"lam": 0.3}), ("fuzzy", {"threshold": 0.3, "divergence": "js"}),
         ("speccascade", {"p_base": 0.2}), ("typical", {"epsilon": 0.05, "delta": 0.5}), ("minp", {"p_base": 0.2}),
         ("eta", {"epsilon": 0.05, "delta": 0.5})]


@pytest.mark.parametrize("name,params", RULES, ids=[r[0] for r in RULES])
def test_acceptance_all_matches_per_token_calls(name, params):
    """The [n, V] block call used by the analysis gives what verify_block's one-token calls give."""
    pairs = analysis.synthetic_pairs("dirichlet", 20, 12, 1.0, seed=1)
    rule, ctx = make_rule(name, **params), RuleContext()
    block = analysis.acceptance_all(rule, pairs.p, pairs.q, ctx)
    one = torch.stack([rule.acceptance(pairs.p, pairs.q, torch.full((20,), v), ctx) for v in range(12)], -1)
    np.testing.assert_allclose(block.numpy(), one.numpy(), atol=0)


def test_synthetic_noise_controls_distance():
    tvs = [analysis.summarise(analysis.rule_stats(make_rule("lossless"), analysis.synthetic_pairs(
        "zipf", 50, 40, noise, seed=2)), analysis.synthetic_pairs("zipf", 50, 40, noise, seed=2))["tv_pq"]
           for noise in (0.0, 0.5, 2.0)]
    assert tvs[0] == pytest.approx(0.0, abs=1e-12) and tvs[0] < tvs[1] < tvs[2]
    a = analysis.synthetic_pairs("dirichlet", 5, 10, 1.0, seed=7)
    b = analysis.synthetic_pairs("dirichlet", 5, 10, 1.0, seed=7)
    assert torch.equal(a.p, b.p) and torch.equal(a.q, b.q)


def test_cli_synthetic_writes_tables_and_plot(tmp_path, capsys):
    out = tmp_path / "an"
    rc = main(["analyze", "--pairs", "20", "--vocab", "30", "--noise", "0.5,1.5", "--rule", "lossless", "cos",
               "cos-ceiling", "minp", "--lam", "0.2,0.8", "--p-base", "0.3", "--sweep-p-base", "0.2,0.6",
               "--sweep-epsilon", "0.001,0.01", "--out", str(out), "--json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    rules = doc["rules"]
    assert len(rules) == 2 * (1 + 2 + 2 + 1)  # two noise levels x (lossless, cos x2, cos-ceiling x2, minp)
    for r in rules:
        assert {"rule", "params", "tv", "kl", "acceptance", "reference", "n"} <= set(r)
    lossless = [r for r in rules if r["rule"] == "lossless"]
    assert all(r["tv"] == 0 and r["kl"] == 0 for r in lossless)
    cos = {(r["source"], r["params"]["lam"]): r for r in rules if r["rule"] == "cos"}
    for source in {s for s, _ in cos}:  # more interpolation toward q: further from p, more acceptance
        assert cos[(source, 0.2)]["tv"] > cos[(source, 0.8)]["tv"]
        assert cos[(source, 0.2)]["acceptance"] > cos[(source, 0.8)]["acceptance"]
    assert len(doc["lemma1"]) == 2 * 4
    for name in ("rules.csv", "lemma1.csv", "analysis.json", "figure5.png"):
        assert (out / name).stat().st_size > 0
    assert (out / "figure5.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((out / "analysis.json").read_text())["rules"] == rules


def test_cli_bad_input(capsys):
    assert main(["analyze", "--rule", "judge"]) == 2
    assert "cannot be analysed" in capsys.readouterr().err
    assert main(["analyze", "--target", "pocket-target"]) == 2
    assert "--target, --draft and --task" in capsys.readouterr().err
    assert main(["analyze", "--rule", "cos-ceiling", "--lam", "0"]) == 2
    assert "lambda" in capsys.readouterr().err


def test_cli_model_pair_on_pocket(capsys):
    """Pairs read off the pocket pair along pocket-math target responses (teacher forcing)."""
    rc = main(["analyze", "--target", "pocket-target", "--draft", "pocket-draft", "--task", "pocket-math",
               "--limit", "1", "--max-new-tokens", "24", "--temperature", "0.7", "--rule", "lossless", "lenience",
               "--lenience", "0.5", "--sweep-p-base", "0.3", "--sweep-epsilon", "0.01", "--json", "--device", "cpu"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    rows = {r["rule"]: r for r in doc["rules"]}
    assert rows["lossless"]["n"] == rows["lenience"]["n"] > 0
    assert rows["lossless"]["tv"] == 0
    assert rows["lenience"]["acceptance"] >= rows["lossless"]["acceptance"]
    assert 0 < rows["lossless"]["tv_pq"] < 1
    assert all(r["delta_be"] == pytest.approx(r["delta_acceptance"], abs=1e-9) for r in doc["lemma1"])
