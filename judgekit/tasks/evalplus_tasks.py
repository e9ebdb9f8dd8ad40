"""HumanEval+ and MBPP+ (evalplus): functions graded by differential testing on base + plus inputs.

Data comes from evalplus's own loaders (`get_human_eval_plus` / `get_mbpp_plus`, which also turn MBPP+'s
JSON inputs back into tuples/sets/complex numbers); `--data-file`, or the `HUMANEVAL_OVERRIDE_PATH` /
`MBPP_OVERRIDE_PATH` variables evalplus itself reads, point them at a local .jsonl/.jsonl.gz.

Why not evalplus's evaluator: it runs the ground truth with `exec` in the calling process
(`trusted_exec`), caches it as a pickle, and runs candidates in a forked `multiprocessing.Process` with
the same uid, the host network and only in-process "reliability guards". judgekit instead builds one
test program per (solution, problem) that calls the entry point on every input with evalplus's per-input
time limits (max(1 s, 4 x the ground truth's time)), runs it in `judgekit.sandbox`, and compares the
returned values here, in the trusted process, with evalplus's rules (exact match, `atol`/float tolerance,
the special oracles). The expected outputs come from running `prompt + canonical_solution` the same way,
also in the sandbox, once per problem.

The outcome is the per-input pass/fail vector (base inputs, then plus inputs); grade = all pass.
"""

from __future__ import annotations

import ast
import json
import math
import os
from typing import Any

from judgekit.errors import JudgekitError
from judgekit.tasks.base import Outcome, Problem, Task
from judgekit.tasks.common import Opaque  # noqa: F401 - re-exported (tests, older imports)
from judgekit.tasks.common import VALUE_ENCODER, apply_limit, check_split, code_fence_closed, decode_value
from judgekit.tasks.common import render_prompt
from judgekit.tasks.humaneval import candidate_program

CHAT_INSTRUCTION = ("Please provide a self-contained Python script that solves the following problem in a "
                    "markdown code block:\n```\n{prompt}\n```\n")
MARK = "@@judgekit-case@@"
MIN_TIME_LIMIT, TIME_LIMIT_FACTOR = 1.0, 4.0  # evalplus.config defaults
ORACLE_TIME_LIMIT = 20.0  # per input, for the ground truth


# --------------------------------------------------------------------------- values in and out of the sandbox

def py_literal(value: Any) -> str:
    """Python source that rebuilds `value`; inputs are embedded in the test program this way, and the text
    stays readable by `ast.literal_eval` (inf as 1e999, complex as (a+bj)) so a stored Problem rebuilds."""
    if value is None or isinstance(value, (bool, int, str, bytes)):
        return repr(value)
    if isinstance(value, float):
        if math.isnan(value):
            raise JudgekitError("cannot embed NaN in a test input")
        return repr(value) if math.isfinite(value) else ("1e999" if value > 0 else "-1e999")
    if isinstance(value, complex):
        return "(" + py_literal(value.real) + ("+" if value.imag >= 0 else "-") + py_literal(abs(value.imag)) + "j)"
    if isinstance(value, list):
        return "[" + ", ".join(py_literal(v) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + "".join(py_literal(v) + ", " for v in value) + ")"
    if isinstance(value, (set, frozenset)):
        body = ", ".join(py_literal(v) for v in value)
        core = "{" + body + "}" if value else "set()"
        return f"frozenset({core})" if isinstance(value, frozenset) else core
    if isinstance(value, dict):
        return "{" + ", ".join(f"{py_literal(k)}: {py_literal(v)}" for k, v in value.items()) + "}"
    raise JudgekitError(f"cannot embed a test input of type {type(value).__name__}")


# The test program's harness (runs in the sandbox). Outputs are printed as tagged JSON after a marker; the
# candidate's own prints go to /dev/null.
HARNESS = r'''
import contextlib as _jk_cl, copy as _jk_copy, json as _jk_json, math as _jk_math, os as _jk_os, signal as _jk_sig, sys as _jk_sys, time as _jk_time
_jk_out = _jk_os.fdopen(_jk_os.dup(1), "w")
ENCODER
class _JkTimeout(BaseException):
    pass
def _jk_alarm(*_):
    raise _JkTimeout()
_jk_sig.signal(_jk_sig.SIGALRM, _jk_alarm)
def _jk_emit(rec):
    _jk_out.write(MARK + _jk_json.dumps(rec) + "\n")
    _jk_out.flush()
_jk_g = {"__name__": "__main__"}
try:
    with open(_jk_os.devnull, "w") as _jk_null, _jk_cl.redirect_stdout(_jk_null):
        exec(compile(SOURCE, "solution.py", "exec"), _jk_g)
    _jk_fn = _jk_g[ENTRY]
except BaseException as _jk_e:
    _jk_emit({"load_error": type(_jk_e).__name__ + ": " + str(_jk_e)[:500]})
    _jk_sys.exit(0)
for _jk_i, (_jk_inp, _jk_lim) in enumerate(zip(INPUTS, LIMITS)):
    _jk_t0 = _jk_time.perf_counter()
    try:
        with open(_jk_os.devnull, "w") as _jk_null, _jk_cl.redirect_stdout(_jk_null):
            _jk_sig.setitimer(_jk_sig.ITIMER_REAL, _jk_lim)
            try:
                _jk_res = _jk_fn(*_jk_copy.deepcopy(_jk_inp))
            finally:
                _jk_sig.setitimer(_jk_sig.ITIMER_REAL, 0)
        _jk_rec = {"i": _jk_i, "out": _jk_enc(_jk_res)}
    except BaseException as _jk_e:
        _jk_rec = {"i": _jk_i, "error": type(_jk_e).__name__}
    _jk_rec["time"] = _jk_time.perf_counter() - _jk_t0
    _jk_emit(_jk_rec)
'''


def harness_program(source: str, entry_point: str, inputs: list[Any], limits: list[float]) -> str:
    header = (f"MARK = {MARK!r}\nSOURCE = {source!r}\nENTRY = {entry_point!r}\n"
              f"INPUTS = {py_literal(list(inputs))}\nLIMITS = {limits!r}\n")
    return header + HARNESS.replace("ENCODER", VALUE_ENCODER, 1)


def parse_records(stdout: str, n: int) -> tuple[list[dict[str, Any] | None], str | None]:
    """Per-input records from the harness output (None where an input produced none) and a load error."""
    records: list[dict[str, Any] | None] = [None] * n
    load_error = None
    for line in stdout.splitlines():
        if not line.startswith(MARK):
            continue
        try:
            rec = json.loads(line[len(MARK):])
        except json.JSONDecodeError:
            continue
        if "load_error" in rec:
            load_error = rec["load_error"]
        elif isinstance(rec.get("i"), int) and 0 <= rec["i"] < n:
            records[rec["i"]] = rec
    return records, load_error


# --------------------------------------------------------------------------- evalplus's comparison rules

EVALPLUS_MISSING = ("tasks humaneval+ and mbpp+ need evalplus, an optional dependency: pip install 'judgekit[code]' "
                    "(or, without its LLM API clients: pip install --no-deps evalplus appdirs tempdir wget psutil)")


def evalplus_module(name: str):
    """An evalplus module, or one clear line saying how to install it (it is no default dependency)."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError as err:
        raise JudgekitError(f"{EVALPLUS_MISSING} ({err})") from None


def _is_floats(x: Any) -> bool:
    if isinstance(x, float):
        return True
    if isinstance(x, (list, tuple)) and x:
        return all(isinstance(i, float) for i in x)
    return False


def output_matches(dataset: str, entry_point: str, inp: Any, out: Any, exp: Any, atol: float) -> bool:
    """evalplus's `unsafe_execute` check for one input, run on values returned from the sandbox."""
    import numpy as np

    evalplus_module("evalplus.eval._special_oracle")  # one clear line when evalplus is not installed
    from evalplus.eval._special_oracle import (
        MBPP_OUTPUT_NOT_NONE_TASKS,
        MBPP_OUTPUT_SET_EQ_TASKS,
        _digit_distance_nums,
        _poly,
        _surface_Area,
    )

    try:
        exact = out == exp
        if dataset == "mbpp":
            if entry_point == "are_equivalent":  # Mbpp/164
                exact = True
            elif entry_point == "sum_div":  # Mbpp/295
                exact = exact or out == 0
            elif entry_point == "surface_Area":  # Mbpp/581
                exact = exact or abs(out - _surface_Area(*inp)) <= atol
            elif entry_point == "digit_distance_nums":  # Mbpp/558
                exact = exact or out == _digit_distance_nums(*inp)
            elif entry_point in MBPP_OUTPUT_SET_EQ_TASKS:
                exact = set(out) == set(exp)
            elif entry_point in MBPP_OUTPUT_NOT_NONE_TASKS:
                exact = out == exp if isinstance(out, bool) else exp == (out is not None)
        if dataset == "humaneval" and entry_point == "find_zero":
            return bool(abs(_poly(*inp, out)) <= atol)
        if atol == 0 and _is_floats(exp):
            atol = 1e-6
        if not exact and atol != 0:
            if type(out) is not type(exp):
                return False
            if isinstance(exp, (list, tuple)) and len(out) != len(exp):
                return False
            return bool(np.allclose(out, exp, rtol=1e-07, atol=atol))
        return bool(exact)
    except Exception:  # noqa: BLE001 - any failure to compare is a failed test
        return False


# --------------------------------------------------------------------------- the tasks

class _EvalPlusTask(Task):
    dataset = ""  # "humaneval" | "mbpp"
    env_var = ""
    splits = ("test",)
    stop_strings = ()

    def __init__(self, memory_mb: int = 2048, workers: int | None = None) -> None:
        self.memory_mb, self.workers = memory_mb, workers
        self._oracle: dict[str, dict[str, Any]] = {}

    # ------------------------------------------------------------------ loading
    def _evalplus_rows(self, data_file: str | None) -> dict[str, dict[str, Any]]:
        """evalplus's loader, pointed at `data_file` (or its override variable); it reads the path from a
        module global set at import time, so the global is patched for the call."""
        module = evalplus_module(f"evalplus.data.{self.dataset}")
        attr = self.env_var  # evalplus keeps the override path in a module global of the same name
        path = data_file or os.environ.get(self.env_var) or getattr(module, attr, None)
        if data_file and os.path.isdir(data_file):
            raise JudgekitError(f"data file {data_file!r} is a directory, not a .jsonl/.jsonl.gz file")
        if data_file and not os.path.isfile(data_file):
            raise JudgekitError(f"data file {data_file!r} does not exist")
        old = getattr(module, attr, None)
        try:
            if path:
                setattr(module, attr, path)
            loader = module.get_mbpp_plus if self.dataset == "mbpp" else module.get_human_eval_plus
            return loader(err_incomplete=False)
        except JudgekitError:
            raise
        except Exception as err:  # noqa: BLE001 - offline download, malformed file
            raise JudgekitError(f"cannot load {self.name} via evalplus ({type(err).__name__}: {err}); pass "
                                f"--data-file or set {self.env_var} to a local .jsonl/.jsonl.gz") from None
        finally:
            setattr(module, attr, old)

    def load(self, split: str = "test", limit: int | None = None, data_file: str | None = None) -> list[Problem]:
        check_split(self.name, split, self.splits, data_file)
        rows = list(self._evalplus_rows(data_file).values())
        source = data_file or self.name
        return [self.make_problem(row, f"{source}: row {i + 1}", i, split)
                for i, row in enumerate(apply_limit(rows, limit))]

    def make_problem(self, row: dict[str, Any], where: str, index: int, split: str) -> Problem:
        for key in ("task_id", "prompt", "canonical_solution", "entry_point", "base_input", "plus_input"):
            if key not in row:
                raise JudgekitError(f"{where}: row lacks field {key!r}")
        inputs = list(row["base_input"]) + list(row["plus_input"])
        reference = {"entry_point": row["entry_point"], "n_base": len(row["base_input"]),
                     "inputs": py_literal(inputs), "atol": float(row.get("atol") or 0)}
        return Problem(task=self.name, problem_id=row["task_id"], question=row["prompt"], reference=reference,
                       meta={"canonical_solution": row["canonical_solution"], "entry_point": row["entry_point"],
                             "inputs": inputs})

    # ------------------------------------------------------------------ prompting
    def build_prompt(self, problem: Problem, tokenizer: Any = None, chat_template: bool = True,
                     few_shot: int = 0) -> str:
        return render_prompt(CHAT_INSTRUCTION.format(prompt=problem.question.strip()), tokenizer, chat_template,
                             plain=problem.question)

    # ------------------------------------------------------------------ running
    def _inputs(self, problem: Problem) -> list[Any]:
        inputs = problem.meta.get("inputs")
        if inputs is None:  # a Problem rebuilt from JSON: the literal is the source of truth
            try:
                inputs = ast.literal_eval(problem.reference["inputs"])
            except (ValueError, SyntaxError) as err:
                raise JudgekitError(f"{problem.problem_id}: unreadable stored inputs ({err})") from None
        return inputs

    def _run(self, source: str, problem: Problem, limits: list[float]) -> tuple[list[dict | None], str | None, str]:
        from judgekit.sandbox import SandboxLimits, run_program

        inputs = self._inputs(problem)
        program = harness_program(source, problem.reference["entry_point"], inputs, limits)
        total = min(float(os.environ.get("EVALPLUS_TIMEOUT_PER_TASK", 60)), sum(limits)) + 5.0
        res = run_program(program, limits=SandboxLimits(timeout_s=total, memory_mb=self.memory_mb,
                                                        max_output_bytes=64 << 20))
        records, load_error = parse_records(res.stdout, len(inputs))
        return records, load_error, res.status

    def oracle(self, problem: Problem) -> dict[str, Any]:
        """Expected outputs and times of the ground truth, computed once per problem in the sandbox."""
        if problem.problem_id not in self._oracle:
            source = problem.question + problem.meta["canonical_solution"]
            n = len(self._inputs(problem))
            records, load_error, status = self._run(source, problem, [ORACLE_TIME_LIMIT] * n)
            if load_error or any(r is None or "error" in r for r in records):
                raise JudgekitError(f"{problem.problem_id}: the canonical solution failed in the sandbox "
                                    f"({load_error or status})")
            self._oracle[problem.problem_id] = {
                "expected": [decode_value(r["out"]) for r in records],
                "limits": [max(MIN_TIME_LIMIT, TIME_LIMIT_FACTOR * r["time"]) for r in records],
            }
        return self._oracle[problem.problem_id]

    def run_solution(self, problem: Problem, source: str) -> list[bool]:
        """Per-input pass/fail of a complete solution's source (evalplus's `{task_id, solution}` sample)."""
        oracle = self.oracle(problem)
        records, load_error, _ = self._run(source, problem, oracle["limits"])
        if load_error:
            return [False] * len(records)
        ref, inputs = problem.reference, self._inputs(problem)
        verdicts = []
        for inp, rec, exp in zip(inputs, records, oracle["expected"]):
            ok = rec is not None and "out" in rec and output_matches(
                self.dataset, ref["entry_point"], inp, decode_value(rec["out"]), exp, ref["atol"])
            verdicts.append(ok)
        return verdicts

    def extract_outcome(self, problem: Problem, completion: str) -> Outcome:
        if not completion.strip():
            return None
        source = candidate_program(problem.question, problem.reference["entry_point"], completion)
        return self.run_solution(problem, source)

    def outcome_fixed(self, completion: str) -> bool:
        return code_fence_closed(completion)

    def grade(self, problem: Problem, outcome: Outcome) -> bool:
        return isinstance(outcome, list) and len(outcome) > 0 and all(outcome)


class HumanEvalPlus(_EvalPlusTask):
    name = "humaneval+"
    source = "evalplus HumanEval+ v0.1.10 (HUMANEVAL_OVERRIDE_PATH for a local file)"
    dataset = "humaneval"
    env_var = "HUMANEVAL_OVERRIDE_PATH"


class MBPPPlus(_EvalPlusTask):
    name = "mbpp+"
    source = "evalplus MBPP+ v0.2.0, 378 tasks (MBPP_OVERRIDE_PATH for a local file)"
    dataset = "mbpp"
    env_var = "MBPP_OVERRIDE_PATH"
