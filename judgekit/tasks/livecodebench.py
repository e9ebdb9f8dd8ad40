"""LiveCodeBench code_generation_lite: competitive-programming problems graded by running their tests.

The outcome of a completion is its per-test pass/fail vector (public tests first, then private ones), so
mining counts a substitution as harmless only when exactly the same tests pass. The code graded is the
last fenced block. A solution runs in one sandboxed process (`judgekit.sandbox`) for all its tests, whose
harness mirrors LiveCodeBench's own grader (`lcb_runner/evaluation/testing_util.py`, `run_test`) so verdicts agree
with it: stdin programs are wrapped in a function, fed the input through patched stdin/open, their
captured stdout compared line by line (numbers as decimals), and a SystemExit after the output is fine;
functional problems call `Solution().<func_name>` when the code defines `class Solution`, else the plain
function `<func_name>`, with one JSON argument per input line, and compare the result with the JSON
expected output after turning a returned tuple (top level only) into a list. tests/test_tasks_lcb_parity.py
checks the agreement on fixtures covering each known difference.

Private tests in the hub files are often stored as base64 -> zlib -> pickle. Unpickling data from a
download can execute arbitrary code, so judgekit decodes them only when asked explicitly
(`LiveCodeBench(trust_pickled_tests=True)` or `JUDGEKIT_TRUST_LCB_PICKLE=1`/`true`/`yes`), and even then
with an unpickler that refuses every class/function reference (the official payload is a plain string).
Without the option, problems keep only their public tests, and every load says how many problems lost
their private tests (their pass rates are inflated).
"""

from __future__ import annotations

import base64
import io
import json
import logging
import math
import os
import pickle
import zlib
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from judgekit.errors import JudgekitError
from judgekit.tasks.base import Outcome, Problem, Task
from judgekit.tasks.common import VALUE_ENCODER, code_fence_closed, decode_value, last_code_block, render_prompt

log = logging.getLogger(__name__)

HUB_ID = "livecodebench/code_generation_lite"
# release_vN = test.jsonl + test2.jsonl ... testN.jsonl (release_v5: 880 problems)
RELEASE_FILES = {f"release_v{n}": ["test.jsonl"] + [f"test{i}.jsonl" for i in range(2, n + 1)] for n in range(1, 7)}
FIELDS = ("question_title", "question_content", "platform", "question_id", "starter_code",
          "public_test_cases", "private_test_cases", "metadata")

SYSTEM = ("You are an expert Python programmer. You will be given a question (problem specification) and will "
          "generate a correct Python program that matches the specification and passes all tests.")
FORMAT_STARTER = ("### Format: You will use the following starter code to write the solution to the problem "
                  "and enclose your code within delimiters.\n```python\n{starter}\n```\n\n")
FORMAT_STDIN = ("### Format: Read the inputs from stdin solve the problem and write the answer to stdout (do not "
                "directly test on the sample inputs). Enclose your code within delimiters as follows. Ensure that "
                "when the python program runs, it reads the inputs, runs the algorithm and writes output to "
                "STDOUT.\n```python\n# YOUR CODE HERE\n```\n\n")

# What LiveCodeBench's own runner prepends to every program (solutions rely on these names).
IMPORT_HEADER = (
    "from string import *\nfrom re import *\nfrom datetime import *\nfrom collections import *\n"
    "from heapq import *\nfrom bisect import *\nfrom copy import *\nfrom math import *\nfrom random import *\n"
    "from statistics import *\nfrom itertools import *\nfrom functools import *\nfrom operator import *\n"
    "from io import *\nfrom sys import *\nfrom json import *\nfrom builtins import *\nfrom typing import *\n"
    "import string\nimport re\nimport datetime\nimport collections\nimport heapq\nimport bisect\nimport copy\n"
    "import math\nimport random\nimport statistics\nimport itertools\nimport functools\nimport operator\n"
    "import io\nimport sys\nimport json\nsys.setrecursionlimit(50000)\n"
)
RESULT_MARK = "@@judgekit-result@@"


class _NoGlobalsUnpickler(pickle.Unpickler):
    """Unpickles only plain data (str, list, dict, numbers): any class or function reference is refused."""

    def find_class(self, module: str, name: str) -> Any:  # noqa: ARG002
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from LiveCodeBench test data")


TRUE_WORDS, FALSE_WORDS = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


def env_flag(name: str) -> bool:
    """A boolean environment variable: 1/true/yes/on or 0/false/no/off (any case); anything else is an error
    rather than a silent "no"."""
    value = os.environ.get(name, "").strip().lower()
    if value in TRUE_WORDS:
        return True
    if value in FALSE_WORDS:
        return False
    raise JudgekitError(f"{name}={os.environ[name]!r}: use one of 1, true, yes, on or 0, false, no, off")


def _hub_blob(raw: str) -> bytes | None:
    """The zlib-decompressed bytes of the hub's base64 -> zlib form (no unpickling); None if it is not that."""
    try:
        return zlib.decompress(base64.b64decode(raw.encode("ascii"), validate=True))
    except (ValueError, UnicodeEncodeError, zlib.error):
        return None


def _check_tests(tests: Any, field: str, where: str) -> list[dict[str, Any]]:
    if not isinstance(tests, list):
        raise JudgekitError(f"{where}: {field} is not a list of tests (got {type(tests).__name__})")
    for j, t in enumerate(tests):
        if not isinstance(t, dict) or not isinstance(t.get("input"), str) or not isinstance(t.get("output"), str):
            raise JudgekitError(f"{where}: {field} test {j} needs string fields 'input' and 'output'")
        if t.get("testtype", "stdin") not in ("stdin", "functional"):
            raise JudgekitError(f"{where}: {field} test {j} has testtype {t.get('testtype')!r}; "
                                "expected 'stdin' or 'functional'")
    return tests


def decode_test_cases(raw: Any, trust_pickled: bool, where: str = "LiveCodeBench data",
                      field: str = "test cases") -> list[dict[str, Any]] | None:
    """Tests from a `*_test_cases` field: a JSON list, or the hub's base64 -> zlib -> pickle form (decoded
    only when trusted). Returns None when the field is in the pickled form and not trusted; anything else
    that is not a list of {input, output} tests is an error naming `where` (file and row)."""
    if isinstance(raw, list):
        return _check_tests(raw, field, where)
    if raw is None or raw == "":
        return []
    if not isinstance(raw, str):
        raise JudgekitError(f"{where}: {field} must be a JSON string, got {type(raw).__name__}")
    try:
        return _check_tests(json.loads(raw), field, where)
    except json.JSONDecodeError:
        pass
    blob = _hub_blob(raw)
    if blob is None:
        raise JudgekitError(f"{where}: {field} is neither JSON nor the hub's base64/zlib/pickle form")
    if not trust_pickled:
        return None
    try:
        payload = _NoGlobalsUnpickler(io.BytesIO(blob)).load()  # the only pickle use in judgekit
        tests = json.loads(payload) if isinstance(payload, (str, bytes)) else payload
    except Exception as err:  # noqa: BLE001 - a refused reference or a broken payload: one line either way
        raise JudgekitError(f"{where}: cannot decode pickled {field} ({type(err).__name__}: {err})") from None
    return _check_tests(tests, field, where)


def encode_test_cases_pickled(tests: list[dict[str, Any]]) -> str:
    """The hub's compressed form (for fixtures and round-trip tests)."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode("ascii")


def _stripped_lines(text: str) -> list[str]:
    # LiveCodeBench's get_stripped_lines: split on "\n" only (not str.splitlines, which also splits on \r etc.)
    return [line.strip() for line in text.strip().split("\n")]


def _decimals(line: str) -> list[Decimal] | None:
    try:
        return [Decimal(tok) for tok in line.split()]
    except (InvalidOperation, ValueError):
        return None


def stdout_matches(actual: str, expected: str) -> bool:
    """LiveCodeBench's stdin/stdout check (grade_stdio): the same number of stripped lines, each equal as
    text or, failing that, as a list of decimals (so '0.50' equals '0.5', but '1e0 2' does not equal '1')."""
    a_lines, e_lines = _stripped_lines(actual), _stripped_lines(expected)
    if len(a_lines) != len(e_lines):
        return False
    for a, e in zip(a_lines, e_lines):
        if a == e:
            continue
        a_dec, e_dec = _decimals(a), _decimals(e)
        try:
            if a_dec is None or e_dec is None or a_dec != e_dec:
                return False
        except InvalidOperation:  # a signalling NaN: the official grader errors, i.e. fails the test
            return False
    return True


# The sandboxed side of a test. It mirrors LiveCodeBench's testing_util (run_test) step by step so that
# verdicts agree with the official grader, quirks included:
# - stdin programs: an `if __name__ == '__main__':` block that ends the program is unwrapped, every
#   non-import statement is moved into a function `wrapped_function` (so module-level `global` names behave
#   as there), the function is called with sys.stdin/open patched to read the test input and sys.stdout
#   captured, and SystemExit is caught (a program may print its answer and then call sys.exit(1));
# - functional programs: `Solution().<func_name>` when the source contains "class Solution", else the
#   module-level function `<func_name>`; each input line is one JSON argument; any exception fails;
# - the same reliability guard (os.kill, quit, subprocess.Popen... set to None) and a signal.alarm timeout.
# The result goes back as one tagged-JSON record after a marker on a private copy of fd 1; comparing it
# with the expected output happens in the trusted process (`functional_matches` / `stdout_matches`).
HARNESS = r'''
import ast as _jk_ast, builtins as _jk_builtins, faulthandler as _jk_fh, json as _jk_json, os as _jk_os
import signal as _jk_sig, sys as _jk_sys
from io import StringIO as _JkStringIO
from types import ModuleType as _JkModuleType
_jk_out = _jk_os.fdopen(_jk_os.dup(1), "w")
INPUTS = _jk_json.loads(_jk_sys.stdin.read())  # the test inputs arrive on stdin (they can be megabytes)
ENCODER
def _jk_emit(rec):
    _jk_out.write(MARK + _jk_json.dumps(rec) + "\n")
    _jk_out.flush()
class TimeoutException(Exception):
    pass
def _jk_alarm(*_):
    raise TimeoutException
_jk_sig.signal(_jk_sig.SIGALRM, _jk_alarm)
def _jk_guard():
    import builtins, shutil, subprocess
    _jk_fh.disable()
    builtins.quit = None
    _jk_os.environ["OMP_NUM_THREADS"] = "1"
    for name in ("kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid", "fork",
                 "forkpty", "killpg", "rename", "renames", "truncate", "replace", "unlink", "fchmod", "fchown",
                 "chmod", "chown", "chroot", "lchflags", "lchmod", "lchown", "getcwd", "chdir"):
        setattr(_jk_os, name, None)
    shutil.rmtree = shutil.move = shutil.chown = None
    subprocess.Popen = None
    builtins.help = None
    for name in ("ipdb", "joblib", "resource", "psutil", "tkinter"):
        _jk_sys.modules[name] = None
def _jk_clean_if_name(code):
    try:
        tree = _jk_ast.parse(code)
        last = tree.body[-1]
        if isinstance(last, _jk_ast.If) and _jk_ast.unparse(last.test).strip() == "__name__ == '__main__'":
            code = _jk_ast.unparse(tree.body[:-1]) + "\n" + _jk_ast.unparse(last.body)
    except BaseException:
        pass
    return code
def _jk_make_function(code):
    try:
        imports, others = [], []
        for stmt in _jk_ast.parse(code).body:
            (imports if isinstance(stmt, (_jk_ast.Import, _jk_ast.ImportFrom)) else others).append(stmt)
        fn = _jk_ast.FunctionDef(name="wrapped_function", args=_jk_ast.arguments(posonlyargs=[], args=[],
                                 kwonlyargs=[], kw_defaults=[], defaults=[]), body=others, decorator_list=[], lineno=-1)
        return HEADER + "\n" + _jk_ast.unparse(imports) + "\n" + _jk_ast.unparse(fn)
    except BaseException:
        return code
def _jk_compile(code):
    _jk_sig.alarm(TIMEOUT)
    try:
        mod = _JkModuleType("tmp_sol", "")
        exec(code, mod.__dict__)
        return mod.Solution() if "class Solution" in code else mod
    finally:
        _jk_sig.alarm(0)
class _JkCapturing(list):
    def __enter__(self):
        self._stdout = _jk_sys.stdout
        _jk_sys.stdout = self._io = _JkStringIO()
        self._io.close = lambda *a: 1
        return self
    def __exit__(self, *args):
        self.append(self._io.getvalue())
        _jk_sys.stdout = self._stdout
def _jk_call_stdin(method, inputs):
    # The official grader's unittest.mock patches, done by hand (importing mock costs a fraction of a second
    # per sandbox): sys.stdin is a StringIO whose read/readline/readlines are replaced on the instance (so
    # iteration still uses StringIO's own), readline raises StopIteration at the end, open() reads the input.
    lines = iter(inputs.split("\n"))
    fake = _JkStringIO(inputs)
    fake.readline = lambda *a: next(lines)
    fake.readlines = lambda *a: inputs.split("\n")
    fake.read = lambda *a: inputs
    saved = _jk_sys.stdin, _jk_builtins.open
    _jk_sys.stdin, _jk_builtins.open = fake, lambda *a, **k: _JkStringIO(inputs)
    try:
        return method()
    except SystemExit:
        pass
    finally:
        _jk_sys.stdin, _jk_builtins.open = saved
def _jk_run(i, inp):
    if FUNC_NAME is None:
        _jk_sig.alarm(TIMEOUT)
        with _JkCapturing() as cap:
            try:
                _jk_call_stdin(_jk_method, inp)
            finally:
                _jk_sig.alarm(0)
        return {"i": i, "stdout": cap[0]}
    args = [_jk_json.loads(line) for line in inp.split("\n")]
    _jk_sig.alarm(TIMEOUT)
    try:
        res = _jk_method(*args)
    finally:
        _jk_sig.alarm(0)
    return {"i": i, "value": _jk_enc(res)}
_jk_guard()
try:
    if FUNC_NAME is None:
        _jk_method = _jk_compile(_jk_make_function(_jk_clean_if_name(SOURCE))).wrapped_function
    else:
        _jk_method = getattr(_jk_compile(HEADER + "\n\n" + SOURCE), FUNC_NAME)
except BaseException as _jk_e:
    _jk_emit({"load_error": type(_jk_e).__name__})
    _jk_sys.exit(0)
for _jk_i, _jk_inp in enumerate(INPUTS):  # the official grader stops at the first failure; the verdict is the same
    try:
        _jk_emit(_jk_run(_jk_i, _jk_inp))
    except BaseException as _jk_e:
        _jk_emit({"i": _jk_i, "error": type(_jk_e).__name__})
'''


def test_program(code: str, func_name: str | None, timeout_s: float) -> str:
    """The sandboxed program running `code` on every test input (see HARNESS; the inputs go to its stdin as
    a JSON list); `func_name=None` for stdin problems. One process per solution, as in LiveCodeBench (so a
    Solution instance is shared by the tests)."""
    header = (f"MARK = {RESULT_MARK!r}\nSOURCE = {code!r}\nFUNC_NAME = {func_name!r}\n"
              f"TIMEOUT = {max(1, int(math.ceil(timeout_s)))}\nHEADER = {IMPORT_HEADER!r}\n")
    return header + HARNESS.replace("ENCODER", VALUE_ENCODER, 1)


def read_results(stdout: str, n: int) -> list[dict[str, Any] | None]:
    """Per-test records from the harness output; None where a test left none (load error, crash, kill)."""
    records: list[dict[str, Any] | None] = [None] * n
    for line in stdout.splitlines():
        if not line.startswith(RESULT_MARK):
            continue
        try:
            rec = json.loads(line[len(RESULT_MARK):])
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and isinstance(rec.get("i"), int) and 0 <= rec["i"] < n and records[rec["i"]] is None:
            records[rec["i"]] = rec
    return records


def functional_matches(value: Any, expected: str) -> bool:
    """LiveCodeBench's call-based check: a returned tuple counts as a list (only at the top level: nested
    tuples, dict keys that are not strings, sets... are compared as they are, like the official grader)."""
    try:
        want = json.loads(expected)
    except json.JSONDecodeError:
        return False
    if isinstance(value, tuple):
        value = list(value)
    try:
        return bool(value == want)
    except Exception:  # noqa: BLE001 - an uncomparable value is a wrong answer
        return False


class LiveCodeBench(Task):
    name = "livecodebench"
    source = f"{HUB_ID} (release_v5, 880 problems; local JSONL test.jsonl..test5.jsonl)"
    splits = ("test",)
    stop_strings = ()  # the outcome is fixed when the code fence closes (see outcome_fixed)

    def __init__(self, release_version: str = "release_v5", trust_pickled_tests: bool | None = None,
                 timeout_s: float = 6.0, memory_mb: int = 2048, workers: int | None = None) -> None:
        if release_version not in RELEASE_FILES:
            raise JudgekitError(f"unknown LiveCodeBench release {release_version!r}; "
                                f"choose from {', '.join(RELEASE_FILES)}")
        self.release_version = release_version
        if trust_pickled_tests is None:
            trust_pickled_tests = env_flag("JUDGEKIT_TRUST_LCB_PICKLE")
        self.trust_pickled_tests = trust_pickled_tests
        self.timeout_s, self.memory_mb, self.workers = timeout_s, memory_mb, workers

    # ------------------------------------------------------------------ loading
    fields = FIELDS

    def data_files(self, data_file: str) -> list[Path]:
        """A directory holds the release's files (test.jsonl, test2.jsonl, ...); a file is read alone."""
        path = Path(data_file)
        if path.is_dir():
            files = [path / f for f in RELEASE_FILES[self.release_version] if (path / f).is_file()]
            if not files:
                raise JudgekitError(f"{data_file}: no LiveCodeBench files "
                                    f"({', '.join(RELEASE_FILES[self.release_version])})")
            return files
        return [path]

    def load(self, split: str = "test", limit: int | None = None, data_file: str | None = None) -> list[Problem]:
        problems = super().load(split, limit, data_file)
        skipped = sum(1 for p in problems if p.meta.get("private_tests_skipped"))
        if skipped:
            # Said on every run that loses tests: public tests alone pass more programs than the full set.
            log.warning("LiveCodeBench: %d of %d problems have pickled private tests that were NOT used (only "
                        "public tests; pass rates will be inflated); set JUDGEKIT_TRUST_LCB_PICKLE=1 to decode "
                        "them safely", skipped, len(problems))
        return problems

    def default_rows(self, split: str) -> list[dict[str, Any]]:
        try:
            from datasets import load_dataset

            ds = load_dataset(HUB_ID, split=split, version_tag=self.release_version)
            return [dict(r) for r in ds]
        except Exception as err:  # noqa: BLE001 - offline hubs fail in many ways; all mean the same here
            raise JudgekitError(
                f"cannot load {HUB_ID} ({self.release_version}) from the hub ({type(err).__name__}); pass "
                "--data-file with a directory holding test.jsonl..testN.jsonl, or one JSONL/Parquet file"
            ) from None

    def make_problem(self, row: dict[str, Any], where: str = "LiveCodeBench row", index: int = 0,
                     split: str = "test") -> Problem:
        public = decode_test_cases(row["public_test_cases"], False, where, "public_test_cases")
        if public is None:
            raise JudgekitError(f"{where}: public_test_cases must be JSON (the hub never pickles public tests)")
        private = decode_test_cases(row["private_test_cases"], self.trust_pickled_tests, where, "private_test_cases")
        skipped = private is None
        metadata = row.get("metadata") or "{}"
        if isinstance(metadata, str):
            try:
                metadata = json.loads(metadata)
            except json.JSONDecodeError as err:
                raise JudgekitError(f"{where}: metadata is not JSON ({err.msg})") from None
        if not isinstance(metadata, dict):
            raise JudgekitError(f"{where}: metadata must be a JSON object, got {type(metadata).__name__}")
        tests = [{"input": t["input"], "output": t["output"], "testtype": t.get("testtype", "stdin")}
                 for t in public + (private or [])]
        functional = any(t["testtype"] == "functional" for t in tests)
        func_name = metadata.get("func_name")
        if functional and not (isinstance(func_name, str) and func_name.isidentifier()):
            raise JudgekitError(f"{where}: functional tests need metadata.func_name (a function name), "
                                f"got {func_name!r}")
        if row["question_id"] in (None, ""):
            raise JudgekitError(f"{where}: question_id is empty")
        if not isinstance(row["question_content"], str) or not row["question_content"].strip():
            raise JudgekitError(f"{where}: question_content must be a non-empty string")
        reference = {"tests": tests, "n_public": len(public), "func_name": func_name,
                     "testtype": "functional" if functional else "stdin"}
        meta = {k: row.get(k) for k in ("question_title", "platform", "contest_id", "contest_date", "difficulty",
                                        "starter_code")}
        meta["private_tests_skipped"] = skipped
        return Problem(task=self.name, problem_id=str(row["question_id"]), question=row["question_content"],
                       reference=reference, meta=meta)

    # ------------------------------------------------------------------ prompting
    def build_prompt(self, problem: Problem, tokenizer: Any = None, chat_template: bool = True,
                     few_shot: int = 0) -> str:
        starter = (problem.meta.get("starter_code") or "").strip()
        fmt = FORMAT_STARTER.format(starter=starter) if starter else FORMAT_STDIN
        text = f"{SYSTEM}\n\n### Question:\n{problem.question}\n\n{fmt}### Answer: (use the provided format with backticks)\n\n"
        return render_prompt(text, tokenizer, chat_template)

    # ------------------------------------------------------------------ outcomes
    def job(self, problem: Problem, code: str) -> tuple[str, str]:
        """The sandbox job (program, stdin) that tests `code` on this problem (see HARNESS)."""
        ref = problem.reference
        func_name = ref.get("func_name") if ref["testtype"] == "functional" else None
        return test_program(code, func_name, self.timeout_s), json.dumps([t["input"] for t in ref["tests"]])

    def run_tests(self, problem: Problem, code: str) -> list[bool]:
        """The per-test pass/fail vector of `code` (one sandboxed process runs all the tests)."""
        return self.run_many_tests([(problem, code)])[0]

    def run_many_tests(self, pairs: list[tuple[Problem, str]]) -> list[list[bool]]:
        """Per-test vectors of many (problem, code) pairs, run in parallel sandboxes."""
        from judgekit.sandbox import SandboxLimits, run_many

        # The harness enforces `timeout_s` per test with an alarm, as LiveCodeBench does; the sandbox's limit
        # is a backstop sized like LiveCodeBench's own ((timeout + 1) * tests + 5 s).
        n_max = max(len(p.reference["tests"]) for p, _ in pairs)
        limits = SandboxLimits(timeout_s=(self.timeout_s + 1.0) * n_max + 5.0, memory_mb=self.memory_mb,
                               max_output_bytes=64 << 20)
        results = run_many([self.job(p, c) for p, c in pairs], limits=limits, workers=self.workers)
        return [self._verdicts(p, res.stdout) for (p, _), res in zip(pairs, results)]

    @staticmethod
    def _verdicts(problem: Problem, stdout: str) -> list[bool]:
        tests = problem.reference["tests"]
        functional = problem.reference["testtype"] == "functional"
        verdicts = []
        for test, rec in zip(tests, read_results(stdout, len(tests))):
            if rec is None or "error" in rec:
                verdicts.append(False)
            elif functional:
                verdicts.append("value" in rec and functional_matches(decode_value(rec["value"]), test["output"]))
            else:
                verdicts.append(isinstance(rec.get("stdout"), str) and stdout_matches(rec["stdout"], test["output"]))
        return verdicts

    def extract_outcome(self, problem: Problem, completion: str) -> Outcome:
        code = last_code_block(completion)
        if code is None or not code.strip():
            return None
        return self.run_tests(problem, code)

    def outcome_key(self, completion: str) -> str:
        return (last_code_block(completion) or "").strip()

    def outcome_fixed(self, completion: str) -> bool:
        return code_fence_closed(completion)

    def equivalent(self, a: Outcome, b: Outcome) -> bool:
        return a == b  # same per-test pass/fail vector (None = no code, equal only to None)

    def grade(self, problem: Problem, outcome: Outcome) -> bool:
        return isinstance(outcome, list) and len(outcome) > 0 and all(outcome)
