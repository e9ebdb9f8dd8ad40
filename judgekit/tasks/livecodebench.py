"""LiveCodeBench code_generation_lite: competitive-programming problems graded by running their tests.

The outcome of a completion is its per-test pass/fail vector (public tests first, then private ones), so
mining counts a substitution as harmless only when exactly the same tests pass. The code graded is the
last fenced block. Every test runs as its own sandboxed process (`judgekit.sandbox`): stdin problems get
the test input on stdin and their stdout is compared line by line; functional problems
(`class Solution`) call `Solution().<func_name>(*args)` with one JSON value per input line.

Private tests in the hub files are often stored as base64 -> zlib -> pickle. Unpickling data from a
download can execute arbitrary code, so judgekit decodes them only when asked explicitly
(`LiveCodeBench(trust_pickled_tests=True)` or `JUDGEKIT_TRUST_LCB_PICKLE=1`), and even then with an
unpickler that refuses every class/function reference (the official payload is a plain string). Without
the option, problems keep only their public tests and a warning says so once.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import os
import pickle
import zlib
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from judgekit.errors import JudgekitError
from judgekit.tasks.base import Outcome, Problem, Task
from judgekit.tasks.common import (
    apply_limit,
    check_split,
    code_fence_closed,
    last_code_block,
    read_records,
    render_prompt,
    require_fields,
)

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
RESULT_MARK = "\n@@judgekit-result@@"

_warned_pickle = False


class _NoGlobalsUnpickler(pickle.Unpickler):
    """Unpickles only plain data (str, list, dict, numbers): any class or function reference is refused."""

    def find_class(self, module: str, name: str) -> Any:  # noqa: ARG002
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from LiveCodeBench test data")


def decode_test_cases(raw: Any, trust_pickled: bool) -> list[dict[str, Any]] | None:
    """Tests from a `*_test_cases` field: a JSON string, or base64/zlib/pickle (only when trusted).

    Returns None when the field is pickled and not trusted.
    """
    if isinstance(raw, list):
        return raw
    if not raw:
        return []
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, TypeError):
        pass
    if not trust_pickled:
        return None
    try:
        blob = zlib.decompress(base64.b64decode(raw.encode("utf-8")))
        payload = _NoGlobalsUnpickler(io.BytesIO(blob)).load()  # the only pickle use in judgekit
        return json.loads(payload) if isinstance(payload, (str, bytes)) else payload
    except Exception as err:  # noqa: BLE001
        raise JudgekitError(f"cannot decode LiveCodeBench private tests ({type(err).__name__}: {err})") from None


def encode_test_cases_pickled(tests: list[dict[str, Any]]) -> str:
    """The hub's compressed form (for fixtures and round-trip tests)."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode("ascii")


def stdout_matches(actual: str, expected: str) -> bool:
    """LiveCodeBench's stdin/stdout check: line by line after stripping; numbers compared as decimals."""
    a_lines = [line.strip() for line in actual.strip().splitlines()]
    e_lines = [line.strip() for line in expected.strip().splitlines()]
    if a_lines == e_lines:
        return True
    if len(a_lines) != len(e_lines):
        return False
    for a, e in zip(a_lines, e_lines):
        if a == e:
            continue
        a_tok, e_tok = a.split(), e.split()
        if len(a_tok) != len(e_tok):
            return False
        try:
            if any(Decimal(x) != Decimal(y) for x, y in zip(a_tok, e_tok)):
                return False
        except InvalidOperation:
            return False
    return True


def functional_program(code: str, func_name: str, test_input: str) -> str:
    """A program that calls `Solution().<func_name>(*args)` and prints the JSON result after a marker."""
    args = [line for line in test_input.split("\n") if line.strip()]
    return (
        IMPORT_HEADER + "\n" + code + "\n\n"
        "import json as _jk_json, sys as _jk_sys\n"
        f"_jk_args = [_jk_json.loads(_l) for _l in {args!r}]\n"
        f"_jk_out = Solution().{func_name}(*_jk_args)\n"
        f"_jk_sys.stdout.write({RESULT_MARK!r} + _jk_json.dumps(_jk_out) + '\\n')\n"
    )


def functional_matches(stdout: str, expected: str) -> bool:
    """Compare the marked JSON result with the expected output (tuples become lists, as in LCB)."""
    if RESULT_MARK not in stdout:
        return False
    got = stdout.rsplit(RESULT_MARK, 1)[1].strip()
    try:
        return json.loads(got) == json.loads(expected)
    except json.JSONDecodeError:
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
            trust_pickled_tests = os.environ.get("JUDGEKIT_TRUST_LCB_PICKLE", "") == "1"
        self.trust_pickled_tests = trust_pickled_tests
        self.timeout_s, self.memory_mb, self.workers = timeout_s, memory_mb, workers

    # ------------------------------------------------------------------ loading
    def _files(self, data_file: str) -> list[Path]:
        path = Path(data_file)
        if path.is_dir():
            files = [path / f for f in RELEASE_FILES[self.release_version] if (path / f).is_file()]
            if not files:
                raise JudgekitError(f"{data_file}: no LiveCodeBench files ({', '.join(RELEASE_FILES[self.release_version])})")
            return files
        return [path]

    def load(self, split: str = "test", limit: int | None = None, data_file: str | None = None) -> list[Problem]:
        check_split(self.name, split, self.splits, data_file)
        if data_file:
            rows: list[dict[str, Any]] = []
            for f in self._files(data_file):
                part = read_records(f)
                require_fields(part, FIELDS, str(f))
                rows.extend(part)
        else:
            rows = self._load_hub(split)
        return [self._problem(row) for row in apply_limit(rows, limit)]

    def _load_hub(self, split: str) -> list[dict[str, Any]]:
        try:
            from datasets import load_dataset

            ds = load_dataset(HUB_ID, split=split, version_tag=self.release_version)
            return [dict(r) for r in ds]
        except Exception as err:  # noqa: BLE001 - offline hubs fail in many ways; all mean the same here
            raise JudgekitError(
                f"cannot load {HUB_ID} ({self.release_version}) from the hub ({type(err).__name__}); pass "
                "--data-file with a directory holding test.jsonl..testN.jsonl, or one JSONL/Parquet file"
            ) from None

    def _problem(self, row: dict[str, Any]) -> Problem:
        global _warned_pickle
        public = decode_test_cases(row["public_test_cases"], trust_pickled=False) or []
        private = decode_test_cases(row["private_test_cases"], self.trust_pickled_tests)
        if private is None:
            private = []
            if not _warned_pickle:
                _warned_pickle = True
                log.warning("LiveCodeBench private tests are pickled and were skipped (only public tests are "
                            "used); pass trust_pickled_tests=True or set JUDGEKIT_TRUST_LCB_PICKLE=1 to decode them")
        metadata = row.get("metadata") or "{}"
        metadata = json.loads(metadata) if isinstance(metadata, str) else dict(metadata)
        tests = [{"input": t["input"], "output": t["output"], "testtype": t.get("testtype", "stdin")}
                 for t in public + private]
        functional = any(t["testtype"] == "functional" for t in tests)
        reference = {"tests": tests, "n_public": len(public), "func_name": metadata.get("func_name"),
                     "testtype": "functional" if functional else "stdin"}
        meta = {k: row.get(k) for k in ("question_title", "platform", "contest_id", "contest_date", "difficulty",
                                        "starter_code")}
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
    def programs(self, problem: Problem, code: str) -> list[tuple[str, str | None]]:
        """One sandbox job per test: (program, stdin)."""
        ref = problem.reference
        jobs: list[tuple[str, str | None]] = []
        for test in ref["tests"]:
            if test["testtype"] == "functional":
                if not ref.get("func_name"):
                    raise JudgekitError(f"LiveCodeBench problem {problem.problem_id}: functional test without func_name")
                jobs.append((functional_program(code, ref["func_name"], test["input"]), None))
            else:
                jobs.append((IMPORT_HEADER + "\n" + code, test["input"]))
        return jobs

    def run_tests(self, problem: Problem, code: str) -> list[bool]:
        """The per-test pass/fail vector of `code` (every test in its own sandbox)."""
        from judgekit.sandbox import SandboxLimits, run_many

        limits = SandboxLimits(timeout_s=self.timeout_s, memory_mb=self.memory_mb, max_output_bytes=32 << 20)
        results = run_many(self.programs(problem, code), limits=limits, workers=self.workers)
        verdicts = []
        for test, res in zip(problem.reference["tests"], results):
            if res.status != "ok":
                verdicts.append(False)
            elif test["testtype"] == "functional":
                verdicts.append(functional_matches(res.stdout, test["output"]))
            else:
                verdicts.append(stdout_matches(res.stdout, test["output"]))
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
