"""MATH-500: competition math; the outcome is the last `\\boxed{...}` answer, graded with math-verify."""

from __future__ import annotations

import json
import re
import select
import subprocess
import sys
import threading
from typing import Any

from judgekit.tasks.base import Outcome, Problem, Task
from judgekit.tasks.common import render_prompt, text_field

INSTRUCTION = "Solve the following math problem. Put your final answer within \\boxed{}."
FIELDS = ("problem", "answer")
# "The final answer is X." / "The answer is X." (no box): X runs to a sentence end or the end of the line.
_FINAL_RE = re.compile(r"answer is[:\s]*\$?([^\n$]+?)\$?\s*(?:\.\s|\.?$)", re.I | re.M)
_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])")
# `\boxed 5` (no braces; the Hendrycks MATH convention): the box holds the next run of non-space text.
_BARE_BOX_RE = re.compile(r"\s+([^\s$]+)")
_PERCENT_RE = re.compile(r"\\?%")
MATH_TIMEOUT_S = 5  # math-verify's own limit for each parse and for the comparison


def _box_content(text: str, start: int) -> str | None:
    """The argument of a `\\boxed` whose name ends at `start`: `{...}` with balanced braces, or one bare
    token (`\\boxed 5.` -> '5'); None when the braces never close."""
    rest = text[start:]
    stripped = rest.lstrip()
    if stripped.startswith("{"):
        open_at = start + len(rest) - len(stripped) + 1
        depth = 1
        for i in range(open_at, len(text)):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    return text[open_at:i].strip()
        return None
    m = _BARE_BOX_RE.match(rest)
    if not m:
        return None
    token = m.group(1).rstrip(".,;:")
    return token or None


def last_boxed(text: str) -> str | None:
    """The contents of the last `\\boxed{...}` / `\\boxed X` (or `\\fbox`); None if there is none complete."""
    for m in reversed(list(_BOX_RE.finditer(text))):
        content = _box_content(text, m.end())
        if content is not None:
            return content
    return None


def extract_math_answer(completion: str) -> str | None:
    """The boxed answer, else what follows the last '(final) answer is'; None when no answer is stated."""
    boxed = last_boxed(completion)
    if boxed is not None:
        return boxed
    found = _FINAL_RE.findall(completion)
    return found[-1].strip() if found else None


def _drop_percent(text: str) -> str:
    """MATH's convention (as its reference grader's normalisation): a percent sign is dropped, so `50\\%`
    equals `50` but not `0.5` or `\\frac12`. math-verify alone accepts all three, which makes equality
    non-transitive (50\\% = 50 and 50\\% = 0.5, yet 50 != 0.5)."""
    return _PERCENT_RE.sub("", text).strip()


def _verify(gold: str, answer: str, timeout: int | None) -> bool:
    from math_verify import parse, verify

    try:
        g = parse(f"${gold}$", parsing_timeout=timeout)
        a = parse(f"${answer}$", parsing_timeout=timeout)
        return bool(g and a and verify(g, a, timeout_seconds=timeout))
    except Exception:  # noqa: BLE001 - an unparsable answer (or a timed-out one) is simply not equal
        return False


# A helper process runs `_verify` in its main thread, where math-verify's SIGALRM limits work. It is a plain
# `python -c` child reading one JSON request per line (not multiprocessing: spawn re-imports the caller's
# __main__, fork copies a threaded caller's locks), and is killed when it does not answer in time.
_HELPER = r"""
import json, sys
from math_verify import parse, verify
def _verify(gold, answer, timeout):
    try:
        g = parse("$" + gold + "$", parsing_timeout=timeout)
        a = parse("$" + answer + "$", parsing_timeout=timeout)
        return bool(g and a and verify(g, a, timeout_seconds=timeout))
    except Exception:
        return False
sys.stdout.write("ready\n"); sys.stdout.flush()
for line in sys.stdin:
    gold, answer, timeout = json.loads(line)
    sys.stdout.write(json.dumps(_verify(gold, answer, timeout)) + "\n"); sys.stdout.flush()
"""
_IDLE: list[subprocess.Popen] = []
_IDLE_LOCK = threading.Lock()


def _read_line(proc: subprocess.Popen, timeout_s: float) -> str | None:
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    return proc.stdout.readline() if ready else None


def _start_helper() -> subprocess.Popen | None:
    proc = subprocess.Popen([sys.executable, "-c", _HELPER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, bufsize=1)
    if _read_line(proc, 120.0) != "ready\n":  # importing sympy takes seconds on a busy machine
        proc.kill()
        proc.wait()
        return None
    return proc


def _verify_in_helper(gold: str, answer: str, limit_s: float) -> bool:
    """`_verify` in a helper process, with a hard wall-clock limit: a stuck helper is killed and the answers
    count as different. Idle helpers are reused (one per concurrently comparing thread)."""
    with _IDLE_LOCK:
        proc = _IDLE.pop() if _IDLE else None
    if proc is None or proc.poll() is not None:
        proc = _start_helper()
        if proc is None:
            return False
    try:
        proc.stdin.write(json.dumps([gold, answer, MATH_TIMEOUT_S]) + "\n")
        proc.stdin.flush()
        line = _read_line(proc, limit_s)
    except OSError:
        line = None
    if line is None or not line.strip():
        proc.kill()
        proc.wait()
        return False
    with _IDLE_LOCK:
        _IDLE.append(proc)
    return json.loads(line) is True


def math_equal(gold: str, answer: str, limit_s: float = 3 * MATH_TIMEOUT_S + 5) -> bool:
    """math-verify equivalence, gold first (its `verify` is not symmetric), percent signs dropped.

    math-verify bounds parsing and comparison with SIGALRM, which only works on the main thread; from any
    other thread (evaluation and mining call this from workers) the comparison runs in a helper process,
    under the same limits, which is killed after `limit_s` seconds, so a pathological answer such as
    `(x+1)^{200000}` costs seconds, not minutes.
    """
    gold, answer = _drop_percent(gold), _drop_percent(answer)
    if gold == answer:
        return True
    if not gold or not answer:
        return False
    if threading.current_thread() is threading.main_thread():
        return _verify(gold, answer, MATH_TIMEOUT_S)
    return _verify_in_helper(gold, answer, limit_s)


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
