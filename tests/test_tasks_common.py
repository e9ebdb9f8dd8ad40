"""The shared task helpers are the only implementations: one chat renderer (tasks, the decoder's
`models.format_prompt`, pocket prompts), one number normaliser, one saved-problems reader."""

from __future__ import annotations

import json

import pytest

from judgekit.errors import JudgekitError
from judgekit.tasks import get_task
from judgekit.tasks.common import normalize_number, render_prompt
from judgekit.tasks.pocket_common import problems_from_file


class ChatTok:
    chat_template = "x"

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + ("<assistant>" if add_generation_prompt else "")


def test_render_prompt_chat_plain_and_shots():
    tok = ChatTok()
    assert render_prompt("q", tok) == "<user>q<assistant>"
    assert render_prompt("q", tok, shots=[("a", "b")], completion_prefix="P") == "<user>a<assistant>b<user>q<assistant>P"
    assert render_prompt("q", tok, chat_template=False, plain="Question: q") == "Question: q"
    assert render_prompt("q", None) == "q"


def test_decoder_and_pocket_use_the_same_renderer():
    from judgekit.models import format_prompt
    from judgekit.tasks.pocket_math import format_prompt as pocket_prompt

    tok = ChatTok()
    assert format_prompt(tok, "hi") == render_prompt("hi", tok)
    assert pocket_prompt("q", tok, shots=[("a", "b")]) == render_prompt("q", tok, shots=[("a", "b")])
    assert pocket_prompt("q", None, shots=[("a", "b")]) == "Question: a\nAnswer: b\n\nQuestion: q\nAnswer: "


def test_pocket_math_grades_with_the_shared_normaliser():
    task = get_task("pocket-math")
    (p,) = task.load("test", limit=1)
    answer = p.reference
    assert task.grade(p, task.extract_outcome(p, f"... #### {answer}.0"))
    assert normalize_number(f"{int(answer):,}") == str(int(answer))


def test_problems_from_file_and_its_errors(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"problem_id": 7, "question": "q?", "reference": "3", "meta": {"k": 1}}) + "\n")
    (p,) = problems_from_file(str(path), "pocket-math", None)
    assert (p.problem_id, p.question, p.reference, p.meta) == ("7", "q?", "3", {"k": 1})
    assert get_task("pocket-math").load(data_file=str(path))[0].question == "q?"
    path.write_text(json.dumps({"problem_id": 7, "question": None, "reference": "3"}) + "\n")
    with pytest.raises(JudgekitError, match="row 1: field 'question'"):
        problems_from_file(str(path), "pocket-math", None)


def test_split_check_is_shared():
    for name in ("gsm8k", "pocket-math", "pocket-code"):
        with pytest.raises(JudgekitError, match=f"task {name} has no split 'dev'"):
            get_task(name).load("dev", limit=1)
