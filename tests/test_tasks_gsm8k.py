"""GSM8K: loader on the official layout, answer extraction (every accepted form and the tricky ones), grading."""

from __future__ import annotations

from pathlib import Path

import pytest

from judgekit.errors import JudgekitError
from judgekit.tasks import get_task
from judgekit.tasks.common import normalize_number, read_records
from judgekit.tasks.gsm8k import answer_fixed, extract_answer, gold_answer

FIXTURE = str(Path(__file__).parent / "fixtures" / "gsm8k_sample.jsonl")


class FakeTokenizer:
    chat_template = "{{ messages }}"

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        assert tokenize is False and add_generation_prompt is True
        return "<|user|>" + messages[0]["content"] + "<|assistant|>"


@pytest.fixture(scope="module")
def task():
    return get_task("gsm8k")


def test_load_local_jsonl_and_parquet(task, tmp_path):
    problems = task.load(split="test", data_file=FIXTURE)
    assert [p.reference for p in problems] == ["72", "2500", "-7"]
    assert problems[0].problem_id == "test-0" and "Natalia" in problems[0].question
    assert len(task.load(limit=2, data_file=FIXTURE)) == 2
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(read_records(FIXTURE)), tmp_path / "g.parquet")
    assert [p.reference for p in task.load(data_file=str(tmp_path / "g.parquet"))] == ["72", "2500", "-7"]


def test_bad_local_files(task, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q"}\n')
    with pytest.raises(JudgekitError, match="answer"):
        task.load(data_file=str(bad))
    with pytest.raises(JudgekitError, match="does not exist"):
        task.load(data_file=str(tmp_path / "missing.jsonl"))
    with pytest.raises(JudgekitError, match="split"):
        task.load(split="validation")


def test_hub_failure_says_to_pass_data_file(task, monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("no network")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(JudgekitError, match="--data-file"):
        task.load(split="test")


@pytest.mark.parametrize(("completion", "expected"), [
    ("5 + 3 = 8\n#### 8", "8"),
    ("#### 1,234", "1234"),
    ("#### $72.00\n", "72"),
    ("#### -5", "-5"),
    ("The final answer is 18.", "18"),
    ("So the final answer is $1,000.", "1000"),
    ("The final answer is $\\boxed{42}$", "42"),
    ("Therefore x = \\boxed{-3.50}", "-3.5"),
    ("He had 3 apples, bought 4 more, so 7 apples.", "7"),  # last-number fallback
    ("72.0", "72"),
    ("It costs 0.5 dollars", "0.5"),
    ("no digits here", None),
])
def test_extract_each_form(completion, expected):
    assert extract_answer(completion) == expected


def test_marker_beats_other_numbers():
    # numbers from the question restated after the answer, several candidates, a range with a hyphen
    text = "Tom has 15 pages and 20 more.\n#### 35\nCheck: 15 + 20 = 35 pages, over 3-4 days."
    assert extract_answer(text) == "35"
    assert extract_answer("The final answer is 12. Later I mention 99 and 100.") == "12"
    assert extract_answer("First \\boxed{3}, corrected: \\boxed{4}") == "4"
    assert extract_answer("#### 5\n... #### 6\n") == "6"  # the last marker wins
    assert extract_answer("costs $1,234,567.80 in total") == "1234567.8"
    assert extract_answer("from 3-4 weeks") == "4"


def test_normalisation():
    assert normalize_number("$1,234.") == "1234"
    assert normalize_number("72.0") == normalize_number("72") == "72"
    assert normalize_number("-0.50") == "-0.5"
    assert normalize_number("  ") is None


def test_gold_answer():
    assert gold_answer("work\n#### 2,500") == "2500"
    with pytest.raises(JudgekitError):
        gold_answer("no marker")


def test_outcome_fixed(task):
    assert not task.outcome_fixed("so #### 7")  # 7 could become 72
    assert task.outcome_fixed("so\n#### 72\n")
    assert not task.outcome_fixed("The final answer is 18")
    assert not task.outcome_fixed("The final answer is 18.")  # could be 18.5
    assert task.outcome_fixed("The final answer is 18. ")
    assert task.outcome_fixed("The final answer is 18\n")
    assert answer_fixed("#### 1,000\n")
    assert task.outcome_fixed("#### 3\n\nQuestion: next")


def test_grade_and_equivalent(task):
    p = task.load(data_file=FIXTURE)[1]
    assert task.grade(p, task.extract_outcome(p, "1,250 * 2 = 2,500\n#### 2,500.00"))
    assert not task.grade(p, task.extract_outcome(p, "#### 2400"))
    assert not task.grade(p, None)
    assert task.equivalent("72", "72.0") and task.equivalent(None, None)
    assert not task.equivalent("72", None) and not task.equivalent("72", "27")


def test_prompts(task):
    p = task.load(data_file=FIXTURE)[0]
    plain = task.build_prompt(p, chat_template=False, few_shot=2)
    assert plain.endswith("Answer:") and plain.count("Question:") == 3 and "####" in plain
    chat = task.build_prompt(p, tokenizer=FakeTokenizer(), chat_template=True)
    assert chat.startswith("<|user|>") and chat.endswith("<|assistant|>") and p.question in chat
    assert task.build_prompt(p, tokenizer=FakeTokenizer(), chat_template=False).endswith("Answer:")
