"""HumanEval (the package's real HumanEval.jsonl.gz) and HumanEval+/MBPP+ through evalplus's loaders with
local override files; every program runs in the sandbox."""

from __future__ import annotations

from pathlib import Path

import pytest

from judgekit.errors import JudgekitError
from judgekit.tasks import get_task
from judgekit.tasks.evalplus_tasks import Opaque, decode_value, output_matches, py_literal
from judgekit.tasks.humaneval import candidate_program

FIX = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def humaneval():
    return get_task("humaneval", workers=2)


def test_humaneval_real_file(humaneval):
    problems = humaneval.load(limit=2)
    assert [p.problem_id for p in problems] == ["HumanEval/0", "HumanEval/1"]
    assert len(humaneval.load()) == 164
    p = problems[0]
    assert humaneval.grade(p, humaneval.extract_outcome(p, p.meta["canonical_solution"]))  # continuation
    wrong = "```python\ndef has_close_elements(numbers, threshold):\n    return False\n```"
    assert humaneval.extract_outcome(p, wrong) == [False]
    fenced = ("```python\nfrom typing import List\n\ndef has_close_elements(numbers: List[float], threshold: float)"
              " -> bool:\n    return any(abs(a - b) < threshold for i, a in enumerate(numbers)"
              " for b in numbers[i + 1:])\n```")
    assert humaneval.extract_outcome(p, fenced) == [True]
    assert humaneval.extract_outcome(p, "") is None


def test_humaneval_run_many_and_prompt(humaneval):
    problems = humaneval.load(limit=3)
    outcomes = humaneval.run_completions([(p, p.meta["canonical_solution"]) for p in problems])
    assert outcomes == [[True]] * 3
    assert humaneval.build_prompt(problems[0], chat_template=False) == problems[0].question
    assert humaneval.outcome_fixed("```python\ndef f():\n    pass\n```") and not humaneval.outcome_fixed("    x = 1")
    assert humaneval.outcome_fixed("    return x\ndef other():")


def test_candidate_program_forms():
    prompt = "import math\n\ndef f(x):\n    \"\"\"doc\"\"\"\n"
    assert candidate_program(prompt, "f", "    return x\n\ndef g(): pass") == prompt + "    return x\n"
    assert candidate_program(prompt, "f", "```python\ndef f(x):\n    return 1\n```").startswith("import math\ndef f")
    assert candidate_program(prompt, "f", "```python\n    return 2\n```") == prompt + "    return 2\n"


def test_humaneval_local_file_missing(humaneval, tmp_path):
    with pytest.raises(JudgekitError):
        humaneval.load(data_file=str(tmp_path / "nope.jsonl"))


@pytest.fixture(scope="module")
def mbpp():
    return get_task("mbpp+")


def test_mbpp_plus_subset_via_data_file(mbpp):
    problems = mbpp.load(data_file=str(FIX / "mbpp_plus_sample.jsonl"))
    assert [p.problem_id for p in problems] == ["Mbpp/2", "Mbpp/17"]
    sim = problems[0]
    assert sim.meta["inputs"][0] == [(3, 4, 5, 6), (5, 7, 4, 10)]  # evalplus's deserialiser ran
    good = "```python\ndef similar_elements(a, b):\n    return tuple(sorted(set(a) & set(b)))\n```"
    assert mbpp.extract_outcome(sim, good) == [True] * 4  # set-equality oracle: order does not matter
    bad = "```python\ndef similar_elements(a, b):\n    return (a[0],)\n```"
    assert mbpp.grade(sim, mbpp.extract_outcome(sim, "```python\n" + sim.question + sim.meta["canonical_solution"]
                                                + "```"))
    assert not mbpp.grade(sim, mbpp.extract_outcome(sim, bad))
    only_first = mbpp.load(limit=1, data_file=str(FIX / "mbpp_plus_sample.jsonl"))
    assert len(only_first) == 1


def test_mbpp_plus_per_input_vector_and_timeouts(mbpp):
    sq = mbpp.load(data_file=str(FIX / "mbpp_plus_sample.jsonl"))[1]
    partial = "```python\ndef square_perimeter(a):\n    return 4 * a if isinstance(a, int) else 0\n```"
    assert mbpp.extract_outcome(sq, partial) == [True, True, True, False, True, True]
    slow = ("```python\ndef square_perimeter(a):\n    if a == 5:\n        while True: pass\n    return 4 * a\n```")
    assert mbpp.extract_outcome(sq, slow) == [True, False, True, True, True, True]
    assert mbpp.extract_outcome(sq, "```python\nsyntax error(\n```") == [False] * 6


def test_humaneval_plus_via_override_env(monkeypatch):
    monkeypatch.setenv("HUMANEVAL_OVERRIDE_PATH", str(FIX / "humaneval_plus_sample.jsonl"))
    task = get_task("humaneval+")
    problems = task.load()
    assert [p.problem_id for p in problems] == ["HumanEval/0", "HumanEval/2"]
    trunc = problems[1]
    assert task.grade(trunc, task.extract_outcome(trunc, trunc.meta["canonical_solution"]))
    approx = "```python\ndef truncate_number(number: float) -> float:\n    return number - int(number) + 1e-9\n```"
    assert task.grade(trunc, task.extract_outcome(trunc, approx))  # evalplus's float tolerance
    assert not task.grade(trunc, task.extract_outcome(trunc, "```python\ndef truncate_number(n):\n    return n\n```"))


def test_evalplus_missing_file_is_user_error(mbpp, tmp_path):
    with pytest.raises(JudgekitError, match="does not exist"):
        mbpp.load(data_file=str(tmp_path / "nope.jsonl"))


def test_values_roundtrip_and_oracles():
    value = [1, (2, 3), {4}, set(), {"a": [1.5]}, complex(1, -2), float("inf"), (1,)]
    import ast

    assert ast.literal_eval(py_literal(value)) == value
    assert decode_value({"t": [1, {"s": [2]}]}) == (1, {2})
    assert decode_value({"r": "<obj>"}) == Opaque("<obj>")
    assert output_matches("mbpp", "similar_elements", None, (5, 4), (4, 5), 0)
    assert output_matches("mbpp", "x", None, [1.0, 2.0000001], [1.0, 2.0], 0)
    assert not output_matches("mbpp", "x", None, [1.0, 2.1], [1.0, 2.0], 0)
    assert not output_matches("mbpp", "x", None, 1, "1", 0)
