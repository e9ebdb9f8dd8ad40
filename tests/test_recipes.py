"""The recipes for real pairs (eval/configs, mining/recipes, training/recipes) dry-run with no GPU, no hub and
no judge: each eval config lists its points (judge points skipped with a note), each shell recipe's commands
parse with judgekit's own parser."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from judgekit.cli import _glue_negative_lists, build_parser, main

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures"
SAMPLES = {"math500": FIX / "math500_sample.jsonl", "gsm8k": FIX / "gsm8k_sample.jsonl",
           "mbpp+": FIX / "mbpp_plus_sample.jsonl", "humaneval+": FIX / "humaneval_plus_sample.jsonl",
           "include": FIX / "include_sample.jsonl", "bfcl": FIX / "bfcl"}
CONFIGS = sorted((ROOT / "eval" / "configs").glob("*.toml"))
SCRIPTS = sorted((ROOT / "mining" / "recipes").glob("*.sh")) + sorted((ROOT / "training" / "recipes").glob("*.sh"))


def test_every_pair_has_mining_training_and_eval_recipes():
    names = {p.stem for p in SCRIPTS}
    assert {"llama3.1-8b", "qwen2.5-7b", "qwen2.5-72b-gptq"} <= names
    stems = " ".join(p.stem for p in CONFIGS)
    assert "llama3.1" in stems and "qwen2.5-72b-gptq" in stems and "qwen2.5-math500" in stems


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_eval_config_dry_runs_without_judges(config, tmp_path, capsys, monkeypatch):
    from judgekit.config import load_eval_config as load_config

    monkeypatch.chdir(tmp_path)  # the judges/ the config names do not exist here
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    task = load_config(config)["task"]
    assert main(["eval", "--config", str(config), "--dry-run", "--data-file", str(SAMPLES[task])]) == 0
    out, err = capsys.readouterr()
    assert "problems x" in out and "lossless" in out
    assert "judge" not in out.split("->", 1)[1]  # no judge point listed ...
    assert "does not exist yet; its points are skipped" in err  # ... and the note says why


def test_dry_run_keeps_the_judges_that_exist(tmp_path, capsys):
    from test_eval import save_judge

    judge = save_judge(tmp_path / "j", 64)
    assert main(["eval", "--task", "pocket-math", "--target", "pocket-target", "--draft", "pocket-draft",
                 "--rule", "lossless", "judge", "--judge", str(judge), str(tmp_path / "missing"),
                 "--judge-threshold", "0.5", "--limit", "2", "--out", str(tmp_path / "o"), "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert out.count("judge") >= 1 and str(tmp_path / "missing") in err and str(judge) not in err


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_shell_recipe_commands_parse(script):
    env = {**os.environ, "DRY_RUN": "1", "JUDGEKIT": "judgekit"}
    run = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    lines = [line for line in run.stdout.splitlines() if line.startswith("judgekit ")]
    assert len(lines) >= 2
    parser = build_parser()
    for line in lines:
        args = parser.parse_args(_glue_negative_lists(shlex.split(line)[1:]))  # argparse exits (a test error) on an unknown flag
        assert args.command in ("mine", "train")


def test_tree_table_script_pairs_the_eval_directory_points(tmp_path):
    """eval/tree_table.py (the README's pocket tree table): its rows are the summaries' paired statistics of the
    records, chain and tree, and the difference in differences pairs the same problems."""
    import sys

    from judgekit.evaluate.report import load_rows
    from judgekit.evaluate.summary import compare_rows

    out = tmp_path / "ev"
    assert main(["eval", "--task", "pocket-math", "--target", "pocket-target", "--draft", "pocket-draft",
                 "--threads", "1", "--rule", "lossless", "speccascade", "minp", "typical", "eta", "--p-base", "0.1",
                 "--epsilon", "0.05", "--delta", "0.3", "--temperature", "1.0", "--limit", "4", "--max-new-tokens",
                 "24", "--block-size", "2", "--tree", "chain", "2,1:topk", "--out", str(out), "--quiet"]) == 0
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(ROOT / "eval" / "tree_table.py"), str(out), "--trees", "2,1:topk"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    rows = {r["label"]: r for r in load_rows([str(out)])[0]}
    for shape, suffix in (("chain", ""), ("tree 2,1:topk", " tree 2,1:topk")):
        p = compare_rows(rows["speccascade p_base=0.1" + suffix], rows["minp p_base=0.1" + suffix])
        line = next(ln for ln in lines if ln.startswith(f"| {shape} | speccascade − minp |"))
        assert f"| {p['paired_problems']} / {p['paired_records']} |" in line and f"{100 * p['dq']:+.1f} [" in line
        assert p['be_ratio'] != 1.0 and f"| {p['be_ratio']:.3f} [{p['be_ratio_ci'][0]:.3f}," in line  # a / b, not b / a
    gaps = [ln for ln in lines if ln.startswith("| speccascade − minp, tree 2,1:topk |")
            or ln.startswith("| typical − eta, tree 2,1:topk |")]
    assert len(gaps) == 2 and all(ln.split("|")[2].strip() == "4" for ln in gaps)  # the 4 problems, paired


def test_truncation_mass_reads_each_rules_induced_distribution_at_result_digits():
    """eval/truncation_mass.py (the README's explanation of SpecCascade vs min-p on the hard pair): the masks
    pick the result digits only, and each entry is the mass of that rule's induced distribution on the gold token
    — min-p's is p truncated and renormalised, SpecCascade's q truncated to the same set; with the draft equal to
    the target the two coincide, with another draft they do not."""
    import importlib.util

    import torch

    from judgekit.decode.rules import make_rule
    from judgekit.models import load_model_pair
    from judgekit.tasks import get_task

    spec = importlib.util.spec_from_file_location("truncation_mass", ROOT / "eval" / "truncation_mass.py")
    tm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tm)
    assert tm.result_digit_mask(["So", "Ġ", "3", "Ġ+", "Ġ", "4", "Ġ=", "Ġ", "1", "2", "Ġapples", ".", "Ċ", "5"]) == [
        False, False, False, False, False, False, False, False, True, True, False, False, False, False]
    pair = load_model_pair("pocket-hard-target", "pocket-hard-draft", device="cpu", dtype="fp32")
    task = get_task("pocket-math-hard")
    problems = task.load("test", limit=6)
    rules = {"minp": make_rule("minp", p_base=0.1), "sc": make_rule("speccascade", p_base=0.1)}
    mass = tm.gold_mass(pair, task, problems, rules)
    n = sum(sum(tm.result_digit_mask(pair.tokenizer.convert_ids_to_tokens(
        pair.tokenizer(task.reference_completion(p), add_special_tokens=False)["input_ids"]))) for p in problems)
    assert n > 0 and all(v.numel() == n for v in mass.values())
    assert all(((v >= 0) & (v <= 1 + 1e-6)).all() for v in mass.values())
    kept = mass["minp"] > 0  # a gold digit inside the allowed set: truncating and renormalising only raises it
    assert kept.any() and (mass["minp"][kept] >= mass["p"][kept] - 1e-6).all()
    assert not torch.allclose(mass["minp"], mass["sc"])
    from dataclasses import replace

    same = tm.gold_mass(replace(pair, draft=pair.target), task, problems, rules)
    assert torch.allclose(same["minp"], same["sc"], atol=1e-6) and torch.allclose(same["p"], same["q"])
