"""Theorem 1 in judgekit.evaluate.analysis and `judgekit analyze`: KL_SD and KL_EAGLE against the paper's
formulas, their behaviour as q -> p, G.5's acceptance ordering, and the command's output."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from judgekit.cli import main
from judgekit.decode.rules import RuleContext, make_rule
from judgekit.evaluate import analysis

RULES = [("speccascade", {"p_base": 0.3}), ("typical", {"epsilon": 0.009, "delta": 0.03})]


def _paper_kls(rule, p, q, m):
    """Theorem 1 by hand, per row: KL_SD = sum_{x in A} q/Z(q) log(q Z(p) / (Z(q) p)) and
    KL_EAGLE = log(Z(p) / p(x*)) at the first of the draft's top-m tokens in A (0 where none is: p_A)."""
    allowed = rule._mask(torch.as_tensor(p), RuleContext()).numpy()
    kl_sd, kl_eagle = [], []
    for pr, qr, a in zip(p, q, allowed):
        zp, zq = pr[a].sum(), qr[a].sum()
        kl_sd.append(sum(qr[x] / zq * np.log(qr[x] * zp / (zq * pr[x])) for x in np.flatnonzero(a) if qr[x] > 0))
        hits = [x for x in np.argsort(-qr, kind="stable")[:m] if a[x]]
        kl_eagle.append(np.log(zp / pr[hits[0]]) if hits else 0.0)
    return np.array(kl_sd), np.array(kl_eagle)


@pytest.mark.parametrize("name,params", RULES)
def test_theorem1_matches_the_papers_formulas(name, params):
    rule = make_rule(name, **params)
    pairs = analysis.synthetic_pairs("zipf", 40, 30, 0.7, seed=4)
    rows = analysis.theorem1(pairs, rule, [1, 3])
    for row in rows:
        kl_sd, kl_eagle = _paper_kls(rule, pairs.p.numpy(), pairs.q.numpy(), row["width"])
        assert row["kl_sd"] == pytest.approx(kl_sd.mean(), rel=1e-9, abs=1e-12)
        assert row["kl_eagle"] == pytest.approx(kl_eagle.mean(), rel=1e-9, abs=1e-12)
        assert row["kl_sd_infinite"] == row["kl_eagle_infinite"] == 0


@pytest.mark.parametrize("name,params", RULES)
def test_kl_sd_vanishes_as_q_approaches_p_but_kl_eagle_does_not(name, params):
    rule = make_rule(name, **params)
    exact = analysis.theorem1(analysis.synthetic_pairs("zipf", 60, 40, 0.0, seed=1), rule, [1, 2, 4])
    near = analysis.theorem1(analysis.synthetic_pairs("zipf", 60, 40, 0.1, seed=1), rule, [1, 2, 4])
    for row in exact:  # q = p: the chain emits p_A exactly, the tree its argmax
        assert abs(row["kl_sd"]) < 1e-12 and row["kl_eagle"] > 0.3
    for row in near:  # q close to p: KL_SD < KL_EAGLE (Theorem 1)
        assert row["kl_sd"] < 0.1 < row["kl_eagle"]


def test_tree_acceptance_is_at_least_the_baselines_and_grows_with_width():
    pairs = analysis.synthetic_pairs("dirichlet", 80, 25, 1.0, seed=2)
    for name, params in RULES:
        rows = analysis.theorem1(pairs, make_rule(name, **params), [1, 2, 4])
        for row in rows:
            assert row["acceptance_eagle"] >= row["baseline_acceptance_eagle"]
            assert row["acceptance_sd"] >= row["baseline_acceptance_sd"]  # truncation verification accepts more
        base = [r["baseline_acceptance_eagle"] for r in rows]
        assert base == sorted(base) and base[-1] > base[0]


def test_theorem1_rows_pick_only_truncation_verification_rules():
    pairs = analysis.synthetic_pairs("zipf", 10, 20, 0.5, seed=0)
    rules = [make_rule("lossless"), make_rule("minp", p_base=0.2), make_rule("speccascade", p_base=0.2)]
    rows = analysis.theorem1_rows([pairs], rules, [2])
    assert [r["rule"] for r in rows] == ["speccascade"]
    assert analysis.matched_baseline(rules[2]).describe() == {"rule": "minp", "p_base": 0.2}


def test_cli_writes_theorem1_table_and_figure(tmp_path, capsys):
    out = tmp_path / "an"
    rc = main(["analyze", "--pairs", "20", "--vocab", "30", "--noise", "0.5", "--rule", "speccascade", "typical",
               "--p-base", "0.3", "--epsilon", "0.009", "--tree-width", "1,3", "--theorem1-noise", "0,0.5",
               "--sweep-p-base", "0.3", "--sweep-epsilon", "0.01", "--out", str(out), "--json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    rows = doc["theorem1"]
    assert len(rows) == 2 * 2 * 2  # two noise levels x two rules x two widths
    assert {r["source"] for r in rows} == {"zipf(noise=0)", "zipf(noise=0.5)"}
    for r in rows:
        assert {"kl_sd", "kl_eagle", "width", "acceptance_eagle", "baseline_acceptance_eagle"} <= set(r)
    assert (out / "theorem1.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "theorem1.csv").read_text().count("\n") == len(rows) + 1
    assert json.loads((out / "analysis.json").read_text())["theorem1"] == rows
    # the plain table has the Theorem 1 section
    assert main(["analyze", "--pairs", "10", "--vocab", "20", "--noise", "0.5", "--rule", "speccascade",
                 "--p-base", "0.3", "--tree-width", "2", "--theorem1-noise", "0.1"]) == 0
    text = capsys.readouterr().out
    assert "kl_eagle" in text and "kl_sd" in text


def test_cli_without_truncation_rules_has_no_theorem1(tmp_path, capsys):
    rc = main(["analyze", "--pairs", "10", "--vocab", "20", "--noise", "0.5", "--rule", "lossless",
               "--out", str(tmp_path), "--json"])
    assert rc == 0
    assert json.loads(capsys.readouterr().out)["theorem1"] == []
    assert not (tmp_path / "theorem1.png").exists()


def test_cli_bad_tree_width(capsys):
    assert main(["analyze", "--rule", "speccascade", "--tree-width", "0"]) == 2
    assert "--tree-width" in capsys.readouterr().err


def test_cli_model_pair_theorem1_on_pocket(capsys):
    """KL_SD / KL_EAGLE on the pocket pair's positions along pocket-math target responses."""
    rc = main(["analyze", "--target", "pocket-target", "--draft", "pocket-draft", "--task", "pocket-math",
               "--limit", "1", "--max-new-tokens", "24", "--temperature", "1.0", "--rule", "speccascade",
               "--p-base", "0.3", "--tree-width", "1,2", "--sweep-p-base", "0.3", "--sweep-epsilon", "0.01",
               "--json", "--device", "cpu"])
    assert rc == 0
    rows = json.loads(capsys.readouterr().out)["theorem1"]
    assert [r["width"] for r in rows] == [1, 2] and rows[0]["n"] > 0
    assert rows[0]["source"].startswith("pocket-math")
    assert all(r["acceptance_eagle"] >= r["baseline_acceptance_eagle"] for r in rows)
