"""MATH-500: competition math; the outcome is the last `\\boxed{...}` answer, graded with math-verify."""

from __future__ import annotations

import re
import threading
from typing import Any

from judgekit.tasks.base import Outcome, Problem, Task
from judgekit.tasks.common import render_prompt, text_field

INSTRUCTION = "Solve the following math problem. Put your final answer within \\boxed{}."
FIELDS = ("problem", "answer")
_FINAL_RE = re.compile(r"final answer is[:\s]*\$?([^\n$]+?)\$?\s*(?:\.\s|\.?$)", re.I | re.M)


def last_boxed(text: str) -> str | None:
    """The contents of the last `\\boxed{...}` (or `\\fbox{...}`), braces balanced; None if none is closed."""
    starts = [m.end() for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text)]
    for start in reversed(starts):
        depth = 1
        for i in range(start, len(text)):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    return text[start:i].strip()
    return None


def extract_math_answer(completion: str) -> str | None:
    """The boxed answer, else the 'final answer is X' phrase; None when the completion states no answer."""
    boxed = last_boxed(completion)
    if boxed is not None:
        return boxed
    found = _FINAL_RE.findall(completion)
    return found[-1].strip() if found else None


def _timeouts() -> int | None:
    # math-verify enforces its timeouts with SIGALRM, which works only in the main thread.
    return 5 if threading.current_thread() is threading.main_thread() else None


def math_equal(gold: str, answer: str) -> bool:
    """math-verify equivalence, gold first (its `verify` is not symmetric)."""
    from math_verify import parse, verify

    if gold.strip() == answer.strip():
        return True
    t = _timeouts()
    try:
        g = parse(f"${gold}$", parsing_timeout=t)
        a = parse(f"${answer}$", parsing_timeout=t)
        return bool(g and a and verify(g, a, timeout_seconds=t))
    except Exception:  # noqa: BLE001 - an unparsable answer is simply not equal
        return False


class Math500(Task):
    name = "math500"
    source = "HuggingFaceH4/MATH-500"
    splits = ("test",)
    stop_strings = ()

    fields = FIELDS
    hub = ("HuggingFaceH4/MATH-500", None)

    def make_problem(self, row: dict[str, Any], where: str, index: int, split: str) -> Problem:
        meta = {k: row.get(k) for k in ("solution", "subject", "level")}
        return Problem(task=self.name, problem_id=str(row.get("unique_id") or f"{split}-{index}"),
                       question=text_field(row, "problem", where),
                       reference=text_field(row, "answer", where, numbers=True).strip(), meta=meta)

    def build_prompt(self, problem: Problem, tokenizer: Any = None, chat_template: bool = True,
                     few_shot: int = 0) -> str:
        text = f"{INSTRUCTION}\n\nProblem: {problem.question}"
        return render_prompt(text, tokenizer, chat_template, plain=text + "\n\nSolution:")

    def extract_outcome(self, problem: Problem, completion: str) -> Outcome:
        return extract_math_answer(completion)

    def outcome_fixed(self, completion: str) -> bool:
        return last_boxed(completion) is not None

    def equivalent(self, a: Outcome, b: Outcome) -> bool:
        if a is None or b is None:
            return a is None and b is None
        return math_equal(str(a), str(b))

    def grade(self, problem: Problem, outcome: Outcome) -> bool:
        return outcome is not None and math_equal(str(problem.reference), str(outcome))
