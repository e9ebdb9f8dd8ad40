"""MATH-500: loader on the official layout, boxed-answer extraction, grading with math-verify (gold first)."""

from __future__ import annotations

from pathlib import Path

import pytest

from judgekit.tasks import get_task
from judgekit.tasks.math500 import extract_math_answer, last_boxed

FIXTURE = str(Path(__file__).parent / "fixtures" / "math500_sample.jsonl")


@pytest.fixture(scope="module")
def task():
    return get_task("math500")


def test_load(task):
    problems = task.load(data_file=FIXTURE)
    assert [p.problem_id for p in problems] == ["test/prealgebra/1.json", "test/algebra/2.json", "test/algebra/3.json"]
    assert problems[0].reference == "\\frac{1}{2}" and problems[0].meta["subject"] == "Prealgebra"
    assert len(task.load(limit=1, data_file=FIXTURE)) == 1


def test_last_boxed_nested():
    assert last_boxed("a \\boxed{1} b \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert last_boxed("\\boxed{\\sqrt{\\frac{a}{b}}} end") == "\\sqrt{\\frac{a}{b}}"
    assert last_boxed("unclosed \\boxed{3") is None
    assert extract_math_answer("The final answer is $5$.") == "5"
    assert extract_math_answer("nothing") is None


def test_grade_with_math_verify(task):
    half, three, root = task.load(data_file=FIXTURE)
    assert task.grade(half, task.extract_outcome(half, "so \\boxed{0.5}"))
    assert task.grade(half, task.extract_outcome(half, "\\boxed{\\frac12}"))
    assert not task.grade(half, task.extract_outcome(half, "\\boxed{\\frac{1}{3}}"))
    assert task.grade(three, task.extract_outcome(three, "x = \\boxed{3}"))
    assert task.grade(root, task.extract_outcome(root, "\\boxed{\\sqrt{8}}"))
    assert not task.grade(root, None)


def test_equivalent_and_fixed(task):
    assert task.equivalent("\\frac{1}{2}", "0.5") and task.equivalent(None, None)
    assert not task.equivalent("2", "3") and not task.equivalent("2", None)
    assert task.outcome_fixed("so \\boxed{2}") and not task.outcome_fixed("so \\boxed{2")


def test_prompt(task):
    p = task.load(data_file=FIXTURE)[0]
    assert "\\boxed{}" in task.build_prompt(p, chat_template=False) and p.question in task.build_prompt(p)
