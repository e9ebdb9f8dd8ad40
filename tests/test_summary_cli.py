"""`judgekit eval` summaries rebuilt from every record (a partial rerun extends them), `judgekit compare`, and
the plots `eval` / `plot` write (PNG and PDF)."""

from __future__ import annotations

import json

import pytest

from judgekit.cli import main

POCKET = ["--task", "pocket-math", "--target", "pocket-target", "--draft", "pocket-draft", "--threads", "1",
          "--max-new-tokens", "48", "--quiet"]


@pytest.fixture(scope="module")
def evaldir(tmp_path_factory):
    """Two runs into one directory: lossless, cos and speccascade / minp greedy on 4 problems, then lossless
    alone sampled with two seeds."""
    out = tmp_path_factory.mktemp("ev") / "ev"
    assert main(["eval", *POCKET, "--rule", "lossless", "cos", "speccascade", "minp", "--lam", "0.3",
                 "--p-base", "0.2", "--limit", "4", "--out", str(out)]) == 0
    first = (out / "summary.csv").read_text().splitlines()
    assert main(["eval", *POCKET, "--rule", "lossless", "--limit", "3", "--temperature", "1.0", "--seeds", "0", "1",
                 "--out", str(out)]) == 0
    return out, first


def test_rerun_with_fewer_rules_keeps_every_earlier_row(evaldir, capsys):
    out, first = evaldir
    assert len(first) == 1 + 4
    now = (out / "summary.csv").read_text().splitlines()
    assert len(now) == 1 + 5 and set(first[1:]) <= set(now)  # every earlier row, unchanged, plus the new one
    md = (out / "summary.md").read_text()
    for label in ("| lossless | 0 |", "| cos lam=0.3 | 0 |", "| speccascade p_base=0.2 | 0 |",
                  "| minp p_base=0.2 | 0 |", "| lossless | 1 |"):
        assert label in md
    assert "## pocket-math: pocket-target vs pocket-draft" in md
    # the greedy rows carry their paired comparison; speccascade against its matched baseline
    rows = {r.split(",")[0] + "@" + r.split(",")[3]: r for r in now[1:]}
    assert ",minp p_base=0.2," in rows["speccascade p_base=0.2@0.0"]
    for name in ("summary.md", "summary.csv", "be_quality.png", "be_quality.pdf", "paired.png", "paired.pdf",
                 "truncation.png", "truncation.pdf"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "be_quality.pdf").read_bytes()[:4] == b"%PDF"


def test_eval_json_has_paired_statistics(evaldir, capsys):
    out, _ = evaldir
    # a rerun with nothing left to decode rewrites the summary from the records and prints every row
    assert main(["eval", *POCKET, "--rule", "cos", "--lam", "0.3", "--limit", "4", "--out", str(out), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 5
    cos = next(r for r in rows if r["rule"] == "cos")
    assert cos["baseline"] == "lossless"
    p = cos["paired"]
    assert p["paired_problems"] == 4 and p["mcnemar_p"] is not None and len(p["dq_ci"]) == 2
    assert p["dq"] == pytest.approx(cos["quality"] - next(r["quality"] for r in rows
                                                          if r["rule"] == "lossless" and r["temperature"] == 0))
    assert cos["be_ci"][0] <= cos["block_efficiency"] <= cos["be_ci"][1]


def test_compare_two_points(evaldir, capsys):
    out, _ = evaldir
    assert main(["compare", str(out), "--a", "cos lam=0.3", "--b", "lossless"]) == 0
    text = capsys.readouterr().out
    assert "a = cos lam=0.3; b = lossless" in text
    assert "| 0 | 8 | 4 / 4 |" in text  # only the greedy setting is shared
    assert "2000 resamples, seed 0" in text
    assert main(["compare", str(out), "--a", "speccascade p_base=0.2", "--b", "minp p_base=0.2", "--json",
                 "--resamples", "500"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert len(got) == 1 and got[0]["resamples"] == 500 and got[0]["paired"]["paired_problems"] == 4
    # the same comparison the summary made for speccascade (its matched baseline), up to the resamples
    summary = next(r for r in (out / "summary.csv").read_text().splitlines() if r.startswith("speccascade"))
    assert f",{got[0]['paired']['dq']}," in summary


@pytest.mark.parametrize("argv,message", [
    (["--a", "nope", "--b", "lossless"], "no point 'nope'"),
    (["--a", "cos lam=0.3", "--b", "lossless", "--temperature", "1.0"], "no point 'cos lam=0.3' at T=1"),
    (["--a", "cos lam=0.3", "--b", "lossless", "--resamples", "5"], "--resamples"),
])
def test_compare_errors_are_one_line(evaldir, capsys, argv, message):
    out, _ = evaldir
    assert main(["compare", str(out), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_compare_across_directories_names_the_source(evaldir, tmp_path, capsys):
    import shutil

    out, _ = evaldir
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    assert main(["compare", str(out), str(copy), "--a", "cos lam=0.3", "--b", "lossless"]) == 2
    assert "in several directories" in capsys.readouterr().err
    assert main(["compare", str(out), str(copy), "--a", "copy: cos lam=0.3", "--b", "ev: lossless"]) == 0
    assert "| 0 | 8 | 4 / 4 |" in capsys.readouterr().out


def test_plot_command_writes_png_and_pdf_with_the_task_in_titles(evaldir, tmp_path, capsys):
    out, _ = evaldir
    target = tmp_path / "fig" / "tradeoff.png"
    assert main(["plot", str(out), "--out", str(target), "--title", "check"]) == 0
    for name in ("tradeoff.png", "tradeoff.pdf", "tradeoff-paired.png", "tradeoff-paired.pdf",
                 "tradeoff-truncation.png", "tradeoff-truncation.pdf"):
        assert (tmp_path / "fig" / name).stat().st_size > 0, name
    assert "wrote" in capsys.readouterr().out
