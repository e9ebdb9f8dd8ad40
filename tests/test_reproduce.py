"""`judgekit reproduce`: verdicts follow from the paired intervals, and the quick recipe runs end to end."""

from __future__ import annotations

import json

import pytest

from judgekit.evaluate import reproduce as rp


def test_verdict_follows_the_interval_and_the_papers_direction():
    assert rp.verdict(0.01, 0.05, +1) == rp.REPRODUCED
    assert rp.verdict(0.01, 0.05, -1) == rp.CONTRADICTED
    assert rp.verdict(-0.05, -0.01, -1) == rp.REPRODUCED
    assert rp.verdict(-0.05, -0.01, +1) == rp.CONTRADICTED
    assert rp.verdict(-0.01, 0.02, +1) == rp.NOT_SHOWN == rp.verdict(-0.01, 0.02, -1)
    assert rp.verdict(0.0, 0.0, +1) == rp.NOT_SHOWN  # touching 0 does not exclude it
    assert rp.verdict(None, None, +1) == rp.NOT_MEASURED


def test_paired_difference_pairs_by_problem_and_pools_seeds():
    """Per-problem differences of the pooled means, only problems on both sides, with the summaries' interval
    (the bootstrap of judgekit.evaluate.summary over those differences)."""
    import numpy as np

    from judgekit.evaluate.summary import bootstrap_weights, ratio_interval

    a = {"p1": [1.0, 1.0], "p2": [1.0, 0.0], "p3": [0.0, 0.0], "only-a": [1.0]}
    b = {"p1": [0.0], "p2": [0.0], "p3": [0.0], "only-b": [1.0]}
    s = rp.paired_difference(a, b)
    d = np.array([1.0, 0.5, 0.0])
    assert s["n"] == 3 and s["diff"] == pytest.approx(0.5)
    assert (s["lo"], s["hi"]) == pytest.approx(ratio_interval(d, np.ones(3), bootstrap_weights(3)))
    assert s["lo"] < 0.5 < s["hi"]
    assert rp.paired_difference({}, b)["diff"] is None
    many = {f"p{i}": [1.0] for i in range(200)}
    none = {f"p{i}": [float(i % 10 == 0)] for i in range(200)}  # a true difference of 0.9
    wide = rp.paired_difference(many, none)
    assert wide["lo"] > 0.8 and wide["hi"] <= 1.0


def _records(rule: str, correct: list[int], temperature: float = 1.0, params: dict | None = None) -> list[dict]:
    return [{"rule": rule, "temperature": temperature, "params": json.dumps(params or {}), "problem": f"p{i}",
             "correct": c} for i, c in enumerate(correct)]


@pytest.mark.parametrize("cascade,minp,expected", [
    ([0] * 20 + [1] * 20, [1] * 40, rp.REPRODUCED),      # SpecCascade below min-p: the paper's sign
    ([1] * 40, [0] * 20 + [1] * 20, rp.CONTRADICTED),    # planted the other way round: the verdict flips
    ([1, 0] * 20, [1, 0] * 20, rp.NOT_SHOWN),            # identical outcomes: a zero-width interval at 0
])
def test_a_planted_difference_sets_the_verdict(cascade, minp, expected):
    records = _records("speccascade", cascade, params={"p_base": 0.1}) + _records("minp", minp, params={"p_base": 0.1})
    rows = [r for r in rp.finding_rows({"pocket-math-hard": records}) if r["key"] == "fig6-minp"]
    assert len(rows) == 1 and rows[0]["verdict"] == expected and rows[0]["n"] == 40
    assert rp.verdict(rows[0]["lo"], rows[0]["hi"], -1) == expected
    # findings whose sides have no records are left out rather than reported as measured
    assert {r["key"] for r in rp.finding_rows({"t": records})} == {"fig6-minp"}


def test_sides_match_params_thresholds_and_judge_mixes():
    judge = {"rule": "judge", "temperature": 0.0, "problem": "p0", "correct": 1,
             "params": json.dumps({"judge": "/x/judges/judge-9to1", "threshold": 0.3, "threshold_name": "p80"})}
    assert rp.Side("judge", 0.0, (("threshold_name", "p80"),), judge="9:1").matches(judge)
    assert not rp.Side("judge", 0.0, judge="1:9").matches(judge)
    assert not rp.Side("judge", 1.0, judge="9:1").matches(judge)
    assert not rp.Side("judge", 0.0, (("threshold_name", "p20"),)).matches(judge)
    tree = {**judge, "tree": "2,2,1,1:topk"}
    assert not rp.Side("judge", 0.0, judge="9:1").matches(tree)  # a chain side takes chain records only
    assert rp.Side("judge", 0.0, judge="9:1", tree="2,2,1,1:topk").matches(tree)
    assert not rp.Side("judge", 0.0, judge="9:1", tree="2,2,1,1:topk").matches(judge)


def test_the_shipped_config_names_every_findings_points():
    settings = rp.load_settings()
    assert settings.problems >= 300 and set(settings.mixes) == {"9:1", "1:9"}
    assert "pocket-math-hard" in {t.name for t in settings.tasks}
    swept = {(r, float(s.get("temperature", 0.0)), t) for s in settings.sweeps for r in s["rules"]
             for t in s.get("tree", [None])}
    for f in rp.FINDINGS:
        for side in (f.a, f.b):
            assert (side.rule, side.temperature, side.tree) in swept, f.key


def test_bad_config_is_one_clear_error(tmp_path):
    from judgekit.errors import JudgekitError

    bad = tmp_path / "r.toml"
    bad.write_text("problems = 3\nnot_a_setting = 1\n[[task]]\nname = 'pocket-math'\ntarget = 'a'\ndraft = 'b'\n"
                   "[[sweep]]\nrules = ['lossless']\n")
    with pytest.raises(JudgekitError):
        rp.load_settings(bad)
    with pytest.raises(JudgekitError):
        rp.load_settings(tmp_path / "missing.toml")


def test_quick_recipe_end_to_end_and_resumed(tmp_path, capsys):
    from judgekit.cli import main

    out = tmp_path / "repro"
    args = ["reproduce", "--quick", "--problems", "2", "--tasks", "pocket-math", "--out", str(out)]
    assert main(args) == 0
    doc = json.loads((out / "findings.json").read_text())
    rows = doc["rows"]
    keys = {r["key"] for r in rows}
    assert {"fig4-cos", "fig4-lenience", "tab1-adaptive", "tab1-ceiling", "fig6-minp", "fig6-eta",
            "fig5-eta", "fig5-minp", "tab3-minp", "tab3-eta"} <= keys
    for r in rows:  # every verdict is the one its interval implies
        assert r["verdict"] == rp.verdict(r["lo"], r["hi"], r["direction"])
        assert r["task"] in ("pocket-math", "synthetic")
    table = (out / "findings.md").read_text()
    assert table.count("\n| ") == len(rows) + 1  # header, the rows (Table 3's measured like the others)
    assert all(r["n"] == 2 for r in rows if r["key"].startswith("tab3"))  # the tree's records, paired
    assert "Table 3" in table and (out / "eval" / "pocket-math" / "summary.md").exists()
    assert (out / "eval" / "pocket-math" / "be_quality.png").exists()
    capsys.readouterr()
    assert main(args) == 0  # every stage resumes: nothing is decoded again
    assert "pocket-math: 0 decodings" in capsys.readouterr().out
    assert json.loads((out / "findings.json").read_text())["rows"] == rows


def test_a_task_whose_pair_is_missing_is_reported_not_measured(tmp_path):
    """No judges asked, so nothing is mined; the missing pair stops only its own task."""
    cfg = tmp_path / "r.toml"
    cfg.write_text("problems = 2\nmine_problems = 2\n[[task]]\nname = 'pocket-math-hard'\n"
                   f"target = '{tmp_path / 'no-such-model'}'\ndraft = '{tmp_path / 'no-such-draft'}'\n"
                   "judges = false\n[[sweep]]\nrules = ['lossless']\n[analyze]\npairs = 8\nnoise = [1.0]\n"
                   "p_base = [0.1]\nepsilon = [0.01]\n")
    result = rp.reproduce(tmp_path / "out", rp.load_settings(cfg), log=lambda _m: None)
    assert [r["key"] for r in result["rows"]] == ["fig5-eta", "fig5-minp"]
    table = (tmp_path / "out" / "findings.md").read_text()
    assert "- pocket-math-hard: not measured" in table and "no-such-model" in table
