"""BFCL: the official data layout (package copy, a directory, one question file), bad data as one line, the
outcome (verdict + decoded calls) and mining's equivalence, the checker's private loading, task options on
the command line, and eval/mine end to end on the pocket pair (the plumbing; quality is ~0 there).

The verdicts themselves are compared with BFCL's pipeline in tests/test_tasks_bfcl_parity.py."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

from judgekit.cli import main
from judgekit.errors import JudgekitError
from judgekit.tasks import get_task
from judgekit.tasks.bfcl import DecodeError, decode_calls

FIX = Path(__file__).parent / "fixtures" / "bfcl"
HAVE_BFCL = importlib.util.find_spec("bfcl_eval") is not None
needs_bfcl = pytest.mark.skipif(not HAVE_BFCL, reason="bfcl-eval not installed (pip install --no-deps bfcl-eval)")

CALLS_195 = ["multiplayer_game_finder(platform='Windows 10', rating=4, genre='Action')",
             "calculate_area_under_curve(function='x**2', interval=[0, 5], method='trapezoidal')",
             "geo_distance.calculate(start_location='Los Angeles', end_location='New York', units='kilometers')",
             "send_email(to='john.doe@example.com', subject='Meeting Reminder', "
             "body='Do not forget about our meeting tomorrow at 10 AM', cc='jane.doe@example.com')"]
ANSWER_195 = "[" + ", ".join(CALLS_195) + "]"


@pytest.fixture(scope="module")
def task():
    return get_task("bfcl")


@pytest.fixture(scope="module")
def p195(task):
    return {p.problem_id: p for p in task.load(data_file=str(FIX))}["parallel_multiple_195"]


def test_load_layouts(task, tmp_path):
    problems = task.load(data_file=str(FIX))
    assert [p.problem_id for p in problems] == ["parallel_multiple_0", "parallel_multiple_23", "parallel_multiple_195"]
    p = problems[2]
    assert "x^2" in p.question and p.meta["messages"][0]["role"] == "user"
    assert list(p.reference["ground_truth"][1]) == ["calculate_area_under_curve"]
    assert {f["name"] for f in p.reference["function"]} >= {"send_email", "geo_distance.calculate"}
    json.dumps(p.reference)
    one = task.load(data_file=str(FIX / "BFCL_v4_parallel_multiple.json"), limit=1)
    assert [p.problem_id for p in one] == ["parallel_multiple_0"]
    with pytest.raises(JudgekitError, match="no BFCL_v\\*_simple_python.json"):
        get_task("bfcl", subset="simple_python").load(data_file=str(FIX))
    lone = tmp_path / "BFCL_v4_parallel_multiple.json"
    shutil.copy(FIX / lone.name, lone)
    with pytest.raises(JudgekitError, match="no possible_answer/BFCL_v4_parallel_multiple.json beside it"):
        task.load(data_file=str(lone))
    with pytest.raises(JudgekitError, match="split"):
        task.load(split="train")


def test_bad_data_is_one_line(task, tmp_path):
    (tmp_path / "possible_answer").mkdir()
    rows = [json.loads(line) for line in (FIX / "BFCL_v4_parallel_multiple.json").read_text().splitlines()]
    answers = (FIX / "possible_answer" / "BFCL_v4_parallel_multiple.json").read_text()
    (tmp_path / "possible_answer" / "BFCL_v4_parallel_multiple.json").write_text(answers)

    def load_with(row):
        (tmp_path / "BFCL_v4_parallel_multiple.json").write_text(json.dumps(row) + "\n")
        return task.load(data_file=str(tmp_path))

    with pytest.raises(JudgekitError, match="row 1: question must hold exactly one turn"):
        load_with({**rows[0], "question": [rows[0]["question"][0]] * 2})
    with pytest.raises(JudgekitError, match=r"\[user\] or \[system, user\]"):
        load_with({**rows[0], "question": [[{"role": "assistant", "content": "x"}]]})
    with pytest.raises(JudgekitError, match="has no entry in"):
        load_with({**rows[0], "id": "parallel_multiple_999"})
    with pytest.raises(JudgekitError, match="lacks field"):
        load_with({"id": "parallel_multiple_0", "question": rows[0]["question"]})


def test_subsets():
    with pytest.raises(JudgekitError, match="unknown BFCL subset 'simple_java'.*Python AST categories"):
        get_task("bfcl", subset="simple_java")
    with pytest.raises(JudgekitError, match="takes no option 'language'"):
        get_task("bfcl", language="German")


def test_decoder_never_evals():
    assert decode_calls("f(a=2*3)") == [{"f": {"a": 6}}]
    # a call without keywords is kept as its text (as BFCL does); inside arithmetic BFCL would run it: refused
    assert decode_calls("[f(a=__import__('os').getpid())]") == [{"f": {"a": "__import__('os').getpid()"}}]
    with pytest.raises(DecodeError):
        decode_calls("[f(a=__import__('os').getpid() + 0)]")
    with pytest.raises(DecodeError):  # BFCL's eval would take minutes here: refused, like a bare name
        decode_calls("[f(a=9**9**9**9)]")
    with pytest.raises(DecodeError):
        decode_calls("[f(a='x' * 10**9)]")
    with pytest.raises(DecodeError):
        decode_calls("[f(a=" + "[" * 5000 + "]" * 5000 + ")]")


@needs_bfcl
def test_outcome_and_equivalence(task, p195):
    answer = task.extract_outcome(p195, ANSWER_195)
    assert answer["valid"] and task.grade(p195, answer) and answer["error_type"] is None
    assert answer["calls"][1] == {"function": "calculate_area_under_curve",
                                  "arguments": {"function": "x**2", "interval": [0, 5], "method": "trapezoidal"}}
    # harmless: keyword order, quote style, call order, another accepted value
    for variant in (ANSWER_195.replace("rating=4, genre='Action'", "genre='Action', rating=4"),
                    ANSWER_195.replace("'", '"'),
                    "[" + ", ".join(reversed(CALLS_195)) + "]",
                    ANSWER_195.replace("'Los Angeles'", "'LA'")):
        other = task.extract_outcome(p195, variant)
        assert other["valid"] and task.equivalent(answer, other), variant
    wrong = task.extract_outcome(p195, ANSWER_195.replace("rating=4", "rating=5"))
    assert not wrong["valid"] and not task.equivalent(answer, wrong) and not task.grade(p195, wrong)
    also_wrong = task.extract_outcome(p195, ANSWER_195.replace("rating=4", "rating=3"))
    assert not task.equivalent(wrong, also_wrong)  # two different wrong answers are different results
    same_wrong = task.extract_outcome(p195, ANSWER_195.replace("rating=4, genre='Action'", "genre='Action', rating=5"))
    assert task.equivalent(wrong, same_wrong)
    undecodable = task.extract_outcome(p195, "I would call the game finder first.")
    assert undecodable == {"valid": False, "error_type": "ast_decoder:decoder_failed", "calls": None}
    assert task.equivalent(undecodable, task.extract_outcome(p195, "[f(")) and not task.equivalent(undecodable, wrong)
    tagged = task.extract_outcome(p195, "[send_email(to=('a', 'b'), subject=1j)]")
    assert tagged["calls"][0]["arguments"] == {"to": {"t": ["a", "b"]}, "subject": {"c": [0.0, 1.0]}}
    json.dumps(tagged)
    assert task.outcome_key("```\n[f(a=1)]\n```\n") == "[f(a=1)]"


@needs_bfcl
def test_checker_loads_privately(task, p195):
    from judgekit.tasks.bfcl import official_checker

    checker, language = official_checker()
    assert checker.__module__ == "bfcl_eval.eval_checker.ast_eval.ast_checker" and language.value == "python"
    assert "bfcl_eval.constants.model_config" not in sys.modules  # the stand-in was only there while loading
    assert "openai" not in sys.modules


@needs_bfcl
def test_tasks_show_and_eval_dry_run(capsys):
    assert main(["tasks", "show", "bfcl", "--data-file", str(FIX), "--limit", "1"]) == 0
    out = capsys.readouterr().out
    assert "You are an expert in composing functions." in out and "Note that the provided function is in Python 3" \
        in out and "math_toolkit.sum_of_multiples" in out
    assert main(["eval", "--task", "bfcl", "--subset", "parallel_multiple", "--target", "t", "--draft", "d", "--rule",
                 "lossless", "--out", "x", "--limit", "5", "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith("bfcl: 5 problems x 1 points")
    assert main(["eval", "--task", "math500", "--subset", "x", "--target", "t", "--draft", "d", "--rule", "lossless",
                 "--out", "x", "--dry-run"]) == 2
    assert "task math500 takes no option 'subset' (--subset)" in capsys.readouterr().err


@needs_bfcl
@pytest.mark.slow
def test_eval_and_mine_run_on_the_pocket_pair(tmp_path, capsys):
    """The plumbing: decode BFCL prompts with the pocket pair, grade with the checker, write records and
    mismatches (a tiny budget; the pocket models know no function calling, so quality is ~0)."""
    from judgekit.store.records import read_records

    common = ["--task", "bfcl", "--data-file", str(FIX), "--target", "pocket-target", "--draft", "pocket-draft",
              "--threads", "1", "--max-new-tokens", "8", "--quiet"]
    assert main(["eval", *common, "--limit", "1", "--rule", "lossless", "--out", str(tmp_path / "eval")]) == 0
    records = read_records(tmp_path / "eval").to_pylist()
    assert [r["problem"] for r in records] == ["parallel_multiple_0"]
    assert all(set(json.loads(r["outcome"])) == {"valid", "error_type", "calls"} for r in records)
    assert main(["mine", *common, "--limit", "1", "--out", str(tmp_path / "mine")]) == 0
    assert "mined 1 problems" in capsys.readouterr().out
