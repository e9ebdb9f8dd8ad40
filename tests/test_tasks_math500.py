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


# --------------------------------------------------------------------------- issue 12: extraction and equality

@pytest.mark.parametrize("completion, answer", [
    ("So the result is \\boxed 5", "5"),
    ("$\\boxed 5$.", "5"),
    ("Thus \\boxed 5.", "5"),
    ("hence \\boxed \\frac12 is it", "\\frac12"),
    ("first \\boxed{\\frac{1}{2}}, corrected: \\boxed 3", "3"),
    ("The answer is 8.", "8"),
    ("So the answer is: $x^2$", "x^2"),
    ("The final answer is $\\frac{1}{2}$.", "\\frac{1}{2}"),
    ("\\boxed{3", None),  # unclosed, and no other statement of the answer
    ("\\boxedx = 3", None),
])
def test_answer_extraction(completion, answer):
    assert extract_math_answer(completion) == answer


def test_percent_is_dropped_consistently():
    """`50\\%` means the number 50 (MATH's convention): equal to 50, not to 0.5 or 1/2, in both argument orders,
    so equality stays transitive."""
    from judgekit.tasks.math500 import math_equal

    for same in ("50", "50\\%", "50%"):
        assert math_equal("50\\%", same) and math_equal(same, "50\\%")
    for other in ("0.5", "\\frac12", "\\frac{1}{2}"):
        assert not math_equal("50\\%", other) and not math_equal(other, "50\\%")
    assert math_equal("\\frac12", "0.5")


def test_math_equal_is_bounded_in_worker_threads():
    """math-verify's SIGALRM limits do nothing off the main thread; there the comparison runs in a helper
    process with the same limits and a hard wall-clock cap."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    from judgekit.tasks.math500 import _verify_in_helper, math_equal

    with ThreadPoolExecutor(2) as pool:
        assert pool.submit(math_equal, "\\frac12", "0.5").result()  # also starts a helper
        t0 = time.monotonic()
        assert pool.submit(math_equal, "(x+1)^{200000}", "(x+2)^{200000}").result() is False
        assert time.monotonic() - t0 < 20  # measured ~5.5 s (math-verify's 5 s limit); unbounded it ran > 40 s
        t0 = time.monotonic()
        assert pool.submit(_verify_in_helper, "(x+1)^{200000}", "(x+2)^{200000}", 0.5).result() is False
        assert time.monotonic() - t0 < 5  # the stuck helper is killed at the cap
        assert pool.submit(math_equal, "2", "\\sqrt{4}").result()  # a fresh helper replaces it
