"""LiveCodeBench grading parity: judgekit's verdicts against the official grader's `run_test`.

tests/fixtures/livecodebench_parity holds problems in the official code_generation_lite layout and
(solution, expected verdict) pairs covering ordinary passes and failures (wrong answer, exception, timeout,
whitespace, float output) and every known difference between a naive harness and LiveCodeBench's
(SystemExit after the output, plain `def` without `class Solution`, nested tuples, int dict keys, the
stdin patches, the function wrapping). judgekit's verdicts are always checked against the hard-written
expectations; when the official grader is importable (`pip install --no-deps nvidia-livecodebench`, the
`lcb-parity` extra) the same pairs also go through its `run_test`, in a child process because run_test
disables os/shutil/subprocess functions in the process that calls it. The official grader exec()s the
program in that process: acceptable here only because these fixture programs are ours and trusted.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from judgekit.tasks import get_task
from judgekit.tasks.common import read_records

PARITY_DIR = Path(__file__).parent / "fixtures" / "livecodebench_parity"
TIMEOUT_S = 2  # per test, both graders (the timeout fixtures cost this much)
SOLUTIONS = read_records(PARITY_DIR / "solutions.jsonl")

OFFICIAL_SCRIPT = r'''
import json, os, sys
from livecodebench.evaluation.testing_util import run_test
def official(sample, code, timeout):
    # like LiveCodeBench's check_correctness: each check in a fresh process (run_test's reliability guard
    # breaks os.environ for a second call), a dead or silent child counts as a failure
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            results, _ = run_test(sample, test=code, timeout=timeout)
            msg = json.dumps([r is True or r == 1 for r in results])
        except BaseException:
            msg = "null"
        os.write(w, msg.encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        got = json.loads(f.read() or "null")
    os.waitpid(pid, 0)
    return got
problems = {p["question_id"]: p for p in map(json.loads, open(sys.argv[1]))}
verdicts = {}
for sol in map(json.loads, open(sys.argv[2])):
    p = problems[sol["question_id"]]
    tests = json.loads(p["public_test_cases"]) + json.loads(p["private_test_cases"])
    sample = {"input_output": json.dumps({"inputs": [t["input"] for t in tests],
                                          "outputs": [t["output"] for t in tests],
                                          "fn_name": json.loads(p["metadata"]).get("func_name")})}
    got = official(sample, sol["code"], int(sys.argv[3]))
    verdicts[sol["question_id"] + "/" + sol["case"]] = bool(got) and len(got) == len(tests) and all(got)
sys.stdout.write("@@verdicts@@" + json.dumps(verdicts) + "\n")
'''


def _key(sol: dict) -> str:
    return f"{sol['question_id']}/{sol['case']}"


@pytest.fixture(scope="module")
def judgekit_verdicts() -> dict[str, bool]:
    task = get_task("livecodebench", timeout_s=TIMEOUT_S, workers=2)
    problems = {p.problem_id: p for p in task.load(data_file=str(PARITY_DIR))}
    # extract_outcome takes the code from the completion's fence; run_many_tests grades all pairs in parallel
    pairs = [(problems[s["question_id"]], s["code"] + "\n") for s in SOLUTIONS]
    assert task.outcome_key(f"Here:\n```python\n{SOLUTIONS[0]['code']}\n```") == SOLUTIONS[0]["code"].strip()
    outcomes = task.run_many_tests(pairs)
    return {_key(s): task.grade(p, o) for s, (p, _), o in zip(SOLUTIONS, pairs, outcomes)}


def test_fixtures_cover_the_known_differences():
    cases = {s["case"] for s in SOLUTIONS}
    for needed in ("sys_exit_after_output", "plain_def", "nested_tuples", "zip_tuple", "wrong_answer",
                   "exception", "timeout", "trailing_whitespace", "float_format", "int_keys"):
        assert needed in cases
    assert any(s["expected"] for s in SOLUTIONS) and not all(s["expected"] for s in SOLUTIONS)


def test_judgekit_matches_expected_verdicts(judgekit_verdicts):
    wrong = {_key(s): (judgekit_verdicts[_key(s)], s["why"]) for s in SOLUTIONS
             if judgekit_verdicts[_key(s)] != s["expected"]}
    assert not wrong, wrong


OFFICIAL_AVAILABLE = all(importlib.util.find_spec(m) is not None for m in ("livecodebench", "numpy"))


@pytest.mark.skipif(not OFFICIAL_AVAILABLE,
                    reason="official grader not installed (pip install --no-deps nvidia-livecodebench)")
def test_official_grader_agrees(judgekit_verdicts, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", OFFICIAL_SCRIPT, str(PARITY_DIR / "test.jsonl"), str(PARITY_DIR / "solutions.jsonl"),
         str(TIMEOUT_S)], capture_output=True, text=True, timeout=300, cwd=tmp_path,
        stdin=subprocess.DEVNULL)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("@@verdicts@@")]
    assert line, proc.stderr[-2000:]
    official = json.loads(line[-1][len("@@verdicts@@"):])
    expected = {_key(s): s["expected"] for s in SOLUTIONS}
    assert official == expected  # the fixtures' expectations are the official grader's verdicts
    assert judgekit_verdicts == official
