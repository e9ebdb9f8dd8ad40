"""INCLUDE: the hub layout (by language, from a local file and through `datasets.load_dataset`), lm-eval's
prompt, letter extraction graded exactly, and the hub failure naming --data-file. All offline."""

from __future__ import annotations

from pathlib import Path

import pytest

from judgekit.cli import main
from judgekit.errors import JudgekitError
from judgekit.tasks import get_task
from judgekit.tasks.common import read_records
from judgekit.tasks.include import LANGUAGES, extract_letter

FIXTURE = str(Path(__file__).parent / "fixtures" / "include_sample.jsonl")


def test_load_all_languages_from_a_file():
    problems = get_task("include").load(data_file=FIXTURE)
    assert [p.problem_id for p in problems] == ["German/0", "German/1", "German/2", "Greek/0", "Greek/1", "Hindi/0"]
    assert [p.reference for p in problems] == ["B", "A", "C", "D", "B", "C"]
    assert problems[0].meta["options"] == ["54", "56", "58", "64"] and problems[0].meta["domain"] == "STEM"
    assert problems[3].meta["country"] == "Greece"


def test_language_selection_per_language_and_limit():
    pick = get_task("include", language="hindi, Greek").load(data_file=FIXTURE)
    assert [p.problem_id for p in pick] == ["Greek/0", "Greek/1", "Hindi/0"]  # file order, ids per language
    one_each = get_task("include", per_language=1).load(data_file=FIXTURE)
    assert [p.problem_id for p in one_each] == ["German/0", "Greek/0", "Hindi/0"]
    assert [p.problem_id for p in get_task("include", per_language=2).load(limit=3, data_file=FIXTURE)] == \
        ["German/0", "German/1", "Greek/0"]
    assert get_task("include", language="Tamil").load(data_file=FIXTURE) == []
    with pytest.raises(JudgekitError, match="unknown INCLUDE language 'Klingon'"):
        get_task("include", language="German,Klingon")
    with pytest.raises(JudgekitError, match="subset"):
        get_task("include", subset="huge")
    with pytest.raises(JudgekitError, match="--per-language"):
        get_task("include", per_language=0)
    assert len(LANGUAGES) == 44


def test_bad_rows_are_one_line(tmp_path):
    rows = read_records(FIXTURE)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"language": "German", "question": "q"}\n')
    with pytest.raises(JudgekitError, match="lacks field"):
        get_task("include").load(data_file=str(bad))
    import json

    rows[1]["answer"] = 4
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(JudgekitError, match=r"row 2: field 'answer' must be the option index 0-3"):
        get_task("include").load(data_file=str(bad))


def test_hub_loading_by_language_through_load_dataset(monkeypatch):
    """The real path: one `load_dataset(hub id, language, split=...)` per language, the rows in hub order."""
    import datasets

    by_language: dict[str, list[dict]] = {}
    for row in read_records(FIXTURE):
        by_language.setdefault(row["language"], []).append({k: v for k, v in row.items() if k != "language"})
    calls = []

    def local_hub(path, name=None, split=None, **kwargs):
        calls.append((path, name, split))
        return [dict(r) for r in by_language.get(name, [])]

    monkeypatch.setattr(datasets, "load_dataset", local_hub)
    problems = get_task("include", language="Greek,German").load()
    assert calls == [("CohereLabs/include-base-44", "Greek", "test"), ("CohereLabs/include-base-44", "German", "test")]
    assert [p.problem_id for p in problems] == ["Greek/0", "Greek/1", "German/0", "German/1", "German/2"]
    assert problems[0].meta["language"] == "Greek"  # filled from the config when the rows lack it
    calls.clear()
    lite = get_task("include", subset="lite", per_language=1).load()
    assert [p.problem_id for p in lite] == ["lite/German/0", "lite/Greek/0", "lite/Hindi/0"]
    assert calls[0] == ("CohereLabs/include-lite-44", "Albanian", "test") and len(calls) == 44
    with pytest.raises(JudgekitError, match="split"):
        get_task("include").load(split="train")


def test_unreachable_hub_names_data_file(monkeypatch, capsys):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("no network")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(JudgekitError, match="--data-file"):
        get_task("include").load()
    assert main(["tasks", "show", "include", "--language", "German"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("judgekit: error: cannot load CohereLabs/include-base-44/German")
    assert "--data-file" in err[0]


class ChatTokenizer:
    chat_template = "fake"

    def __init__(self):
        self.seen = None

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        self.seen = messages
        return "|".join(f"{m['role']}:{m['content']}" for m in messages) + "|assistant:"


def test_prompt_is_lm_evals():
    task = get_task("include")
    german, _, _, greek, _, _ = task.load(data_file=FIXTURE)
    # lm-eval: description + doc_to_text with nothing between them in plain text (its system message has no
    # delimiter), the question stripped, and the space before "D." that its YAML template folds in.
    assert task.build_prompt(german, chat_template=False) == (
        "The following is multiple-choice question about STEM.Was ist 7 mal 8?\nA. 54\nB. 56\nC. 58\n D. 64\nAnswer:")
    tok = ChatTokenizer()
    task.build_prompt(greek, tok)
    assert tok.seen == [
        {"role": "system", "content": "The following is multiple-choice question about Arts & Humanities."},
        {"role": "user", "content": "Ποια πόλη ήταν η πρωτεύουσα της Ελλάδας πριν από την Αθήνα;\nA. Θεσσαλονίκη\n"
                                    "B. Πάτρα\nC. Κέρκυρα\n D. Ναύπλιο\nAnswer:"}]


@pytest.mark.parametrize(("completion", "letter"), [
    (" B", "B"), ("B", "B"), (" B. 56", "B"), ("(C) 50 km/h", "C"), ("**D**", "D"), ("[A]", "A"),
    ("The answer is C.", "C"), ("Answer: A", "A"), ("The correct answer is: **B**", "B"),
    ("I first thought the answer is B, but the final answer is D.", "D"),
    (" Because 7*8 = 56", None), ("56", None), (" b", None), ("", None), ("Die Antwort ist B", None),
    (" E", None), ("ABC", None),
])
def test_letter_extraction(completion, letter):
    assert extract_letter(completion) == letter


def test_grading_is_exact_and_outcome_fixed():
    task = get_task("include")
    german = task.load(data_file=FIXTURE)[0]  # gold B
    assert task.grade(german, task.extract_outcome(german, " B. 56"))
    assert not task.grade(german, task.extract_outcome(german, " C. 58"))
    assert not task.grade(german, task.extract_outcome(german, " 56"))  # the option text is not the letter
    assert not task.grade(german, None)
    assert task.equivalent("B", "B") and not task.equivalent("B", "C") and task.equivalent(None, None)
    assert task.outcome_fixed(" B.") and task.outcome_fixed(" B\n")
    assert not task.outcome_fixed(" B")  # may still grow into " Because ..."
    assert not task.outcome_fixed("The answer is B.")  # a leading letter is all that fixes it early
