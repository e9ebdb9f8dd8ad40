"""GSM8K: grade-school word problems; the outcome is the final number of the completion."""

from __future__ import annotations

import re
from typing import Any

from judgekit.errors import JudgekitError
from judgekit.tasks.base import Outcome, Problem, Task
from judgekit.tasks.common import NUMBER_RE, normalize_number, render_prompt, text_field

INSTRUCTION = ("Solve the following math problem step by step. "
               "End your answer with a final line of the form '#### <number>'.")

# Hand-written exemplars in GSM8K's format (not taken from the test split, so few-shot never leaks).
FEW_SHOT: tuple[tuple[str, str], ...] = (
    ("A baker makes 24 muffins and sells 3 boxes of 6 muffins. How many muffins are left?",
     "The baker sells 3 * 6 = 18 muffins.\nSo 24 - 18 = 6 muffins are left.\n#### 6"),
    ("Tom reads 15 pages a day for 4 days and then 20 pages on the fifth day. How many pages did he read?",
     "In four days he reads 15 * 4 = 60 pages.\nWith the fifth day he reads 60 + 20 = 80 pages.\n#### 80"),
    ("A shirt costs $12 and a hat costs half as much. What do 2 shirts and 1 hat cost?",
     "The hat costs 12 / 2 = $6.\nTwo shirts cost 2 * 12 = $24.\nTogether they cost 24 + 6 = $30.\n#### 30"),
    ("Maria had 1,200 stamps and gave away a quarter of them. How many stamps does she have now?",
     "A quarter of 1,200 is 1,200 / 4 = 300.\nShe has 1,200 - 300 = 900 stamps left.\n#### 900"),
)

_HASH_RE = re.compile(r"####([^\n]*)")
_FINAL_RE = re.compile(r"final answer is\b[:\s]*([^\n]*)", re.I)
_BOXED_RE = re.compile(r"\\boxed\s*\{((?:[^{}]|\{[^{}]*\})*)\}")
# "Complete" markers: the answer line has ended, so nothing generated later can change it.
_HASH_DONE_RE = re.compile(r"####[^\n]*\d[^\n]*\n")
_FINAL_DONE_RE = re.compile(r"final answer is\b[^\n]*?\d(?:[^\n]*?)(?:\.(?=\s)|\n)", re.I)


def gold_answer(solution: str, where: str = "GSM8K answer") -> str:
    """The gold number of a GSM8K `answer` field: what follows the last '#### '."""
    if "####" not in solution:
        raise JudgekitError(f"{where}: the answer has no '#### N' line")
    tail = solution.rsplit("####", 1)[1].strip()
    norm = normalize_number(tail.splitlines()[0]) if tail else None
    if norm is None:
        raise JudgekitError(f"{where}: the answer has no number after '####': {solution[-60:]!r}")
    return norm


def _first_number(fragment: str) -> str | None:
    """The first number of an answer fragment ('$1,234.', '\\boxed{72}', '-5 apples')."""
    boxed = _BOXED_RE.search(fragment)
    if boxed:
        fragment = boxed.group(1)
    m = NUMBER_RE.search(fragment)
    return normalize_number(m.group(0)) if m else None


def extract_answer(completion: str) -> str | None:
    """The final number of a completion, by priority: `#### N`, 'The final answer is N', `\\boxed{N}`,
    else the last number written. Returns a normalised string ('1,234.0' -> '1234') or None."""
    for regex in (_HASH_RE, _FINAL_RE):
        matches = regex.findall(completion)
        for fragment in reversed(matches):
            num = _first_number(fragment)
            if num is not None:
                return num
    boxed = _BOXED_RE.findall(completion)
    for content in reversed(boxed):
        m = NUMBER_RE.search(content)
        if m:
            return normalize_number(m.group(0))
    matches = NUMBER_RE.findall(completion)
    return normalize_number(matches[-1]) if matches else None


def answer_fixed(completion: str) -> bool:
    """True once a `#### N` line or a 'The final answer is N.' sentence is complete."""
    return bool(_HASH_DONE_RE.search(completion) or _FINAL_DONE_RE.search(completion))


class GSM8K(Task):
    name = "gsm8k"
    source = "openai/gsm8k (config main)"
    splits = ("train", "test")
    stop_strings = ("\n\nQuestion:",)

    fields = ("question", "answer")
    hub = ("openai/gsm8k", "main")

    def make_problem(self, row: dict[str, Any], where: str, index: int, split: str) -> Problem:
        pid = str(row.get("id", f"{split}-{index}"))
        solution = text_field(row, "answer", where)  # the worked solution ending in '#### N', not a bare number
        return Problem(task=self.name, problem_id=pid, question=text_field(row, "question", where),
                       reference=gold_answer(solution, where), meta={"solution": solution})

    def build_prompt(self, problem: Problem, tokenizer: Any = None, chat_template: bool = True,
                     few_shot: int = 0) -> str:
        shots = "".join(f"Question: {q}\nAnswer: {a}\n\n" for q, a in FEW_SHOT[:max(0, few_shot)])
        text = f"{INSTRUCTION}\n\n{shots}Question: {problem.question}"
        return render_prompt(text, tokenizer, chat_template, plain=text + "\nAnswer:")

    def extract_outcome(self, problem: Problem, completion: str) -> Outcome:
        return extract_answer(completion)

    def outcome_fixed(self, completion: str) -> bool:
        return answer_fixed(completion) or super().outcome_fixed(completion)

    def equivalent(self, a: Outcome, b: Outcome) -> bool:
        if a is None or b is None:
            return a is None and b is None
        return normalize_number(str(a)) == normalize_number(str(b))

    def grade(self, problem: Problem, outcome: Outcome) -> bool:
        return outcome is not None and self.equivalent(outcome, problem.reference)
