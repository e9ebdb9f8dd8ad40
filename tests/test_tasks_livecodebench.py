"""LiveCodeBench: official JSONL layout (public JSON, private base64/zlib/pickle behind the trust option),
stdin and functional problems, per-test outcome vectors computed in the sandbox."""

from __future__ import annotations

import base64
import json
import os
import pickle
import zlib
from pathlib import Path

import pytest

from judgekit.errors import JudgekitError
from judgekit.tasks import get_task
from judgekit.tasks.common import code_fence_closed, last_code_block
from judgekit.tasks.livecodebench import decode_test_cases, encode_test_cases_pickled, stdout_matches

LCB_DIR = str(Path(__file__).parent / "fixtures" / "livecodebench")

GOOD_STDIN = "Read both, add.\n```python\na, b = map(int, input().split())\nprint(a + b)\n```\nDone."
PARTIAL_STDIN = "```python\na, b = map(int, input().split())\nprint(a + b if a < 50 else 0)\n```"
GOOD_FN = ("```python\nclass Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n"
           "        seen = {}\n        for i, x in enumerate(nums):\n            if target - x in seen:\n"
           "                return [seen[target - x], i]\n            seen[x] = i\n```")


@pytest.fixture(scope="module")
def trusted():
    return get_task("livecodebench", trust_pickled_tests=True, workers=2)


@pytest.fixture(scope="module")
def problems(trusted):
    return trusted.load(data_file=LCB_DIR)


def test_untrusted_load_keeps_public_tests_only(monkeypatch):
    monkeypatch.delenv("JUDGEKIT_TRUST_LCB_PICKLE", raising=False)
    task = get_task("livecodebench")
    stdin_p, fn_p = task.load(data_file=LCB_DIR)
    assert len(stdin_p.reference["tests"]) == 2  # pickled private tests skipped
    assert len(fn_p.reference["tests"]) == 3  # JSON private tests are always read


def test_trusted_load(problems):
    stdin_p, fn_p = problems
    assert stdin_p.problem_id == "abc001_a" and stdin_p.reference["testtype"] == "stdin"
    assert len(stdin_p.reference["tests"]) == 4 and stdin_p.reference["n_public"] == 2
    assert fn_p.reference["func_name"] == "twoSum" and fn_p.reference["testtype"] == "functional"
    assert fn_p.meta["platform"] == "leetcode"
    json.dumps(stdin_p.reference)  # JSON-serialisable


def test_release_selects_files_and_single_file_loads(tmp_path):
    assert len(get_task("livecodebench", release_version="release_v1").load(data_file=LCB_DIR)) == 1
    assert len(get_task("livecodebench").load(data_file=os.path.join(LCB_DIR, "test2.jsonl"))) == 1
    with pytest.raises(JudgekitError, match="release"):
        get_task("livecodebench", release_version="release_v99")
    with pytest.raises(JudgekitError, match="no LiveCodeBench files"):
        get_task("livecodebench").load(data_file=str(tmp_path))


def test_pickle_roundtrip_and_refusal():
    tests = [{"input": "1\n", "output": "2\n", "testtype": "stdin"}]
    enc = encode_test_cases_pickled(tests)
    assert decode_test_cases(enc, trust_pickled=True) == tests
    assert decode_test_cases(enc, trust_pickled=False) is None
    assert decode_test_cases(json.dumps(tests), trust_pickled=False) == tests

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    evil = base64.b64encode(zlib.compress(pickle.dumps(Evil()))).decode()
    with pytest.raises(JudgekitError, match="refusing"):
        decode_test_cases(evil, trust_pickled=True)


def test_stdout_matching():
    assert stdout_matches("3\n", "3")
    assert stdout_matches("1 2 \n3\n\n", "1 2\n3")
    assert stdout_matches("0.50\n", "0.5")
    assert not stdout_matches("3\n4", "3")
    assert not stdout_matches("abc", "abd")


def test_stdin_outcomes(trusted, problems):
    p = problems[0]
    assert trusted.extract_outcome(p, GOOD_STDIN) == [True, True, True, True]
    partial = trusted.extract_outcome(p, PARTIAL_STDIN)
    assert partial == [True, True, False, True]
    assert trusted.grade(p, [True] * 4) and not trusted.grade(p, partial)
    assert trusted.extract_outcome(p, "no code at all") is None
    assert trusted.extract_outcome(p, "```python\nthis is not python(\n```") == [False] * 4


def test_hanging_solution_fails_every_test(problems):
    quick = get_task("livecodebench", trust_pickled_tests=True, timeout_s=1.0, workers=4)
    assert quick.extract_outcome(problems[0], "```python\nwhile True: pass\n```") == [False] * 4


def test_functional_outcomes(trusted, problems):
    p = problems[1]
    assert trusted.extract_outcome(p, GOOD_FN) == [True, True, True]
    wrong = GOOD_FN.replace("return [seen[target - x], i]", "return [i, seen[target - x]]")
    assert trusted.extract_outcome(p, wrong) == [False, False, False]


def test_equivalence_is_same_vector(trusted):
    assert trusted.equivalent([True, False], [True, False])
    assert not trusted.equivalent([True, False], [True, True])
    assert trusted.equivalent(None, None) and not trusted.equivalent(None, [False])


def test_outcome_fixed_and_code_blocks(trusted):
    assert not trusted.outcome_fixed("```python\nprint(1)\n")
    assert trusted.outcome_fixed("```python\nprint(1)\n```")
    assert not trusted.outcome_fixed("no fence ```")
    assert last_code_block("```py\na=1\n```\ntext\n```python\nb=2\n```") == "b=2\n"
    assert last_code_block("```python\nunclosed=1\n") == "unclosed=1\n"
    assert last_code_block("plain") is None
    assert code_fence_closed("x\n```\ncode\n```")


def test_prompt_has_format(trusted, problems):
    stdin_prompt = trusted.build_prompt(problems[0], chat_template=False)
    assert "Read the inputs from stdin" in stdin_prompt and problems[0].question in stdin_prompt
    fn_prompt = trusted.build_prompt(problems[1], chat_template=False)
    assert "class Solution" in fn_prompt and "starter code" in fn_prompt


def test_large_input_goes_through_stdin(tmp_path):
    """Test inputs reach the sandboxed harness on stdin, not inside the program text (LCB inputs can be MBs)."""
    nums = list(range(200_000))
    tests = [{"input": f"{len(nums)}\n{' '.join(map(str, nums))}\n", "output": f"{sum(nums)}\n", "testtype": "stdin"}]
    row = {"question_title": "sum", "question_content": "Sum them.", "platform": "atcoder", "question_id": "big",
           "starter_code": "", "public_test_cases": json.dumps(tests), "private_test_cases": "[]", "metadata": "{}"}
    path = tmp_path / "test.jsonl"
    path.write_text(json.dumps(row) + "\n")
    task = get_task("livecodebench", timeout_s=10)
    (p,) = task.load(data_file=str(path))
    program, stdin = task.job(p, "print(0)")
    assert len(program) < 20_000 and len(stdin) > 1_000_000
    code = "import sys\nn = int(input())\nprint(sum(map(int, input().split())))\n"
    assert task.run_tests(p, code) == [True]
    assert task.run_tests(p, code.replace("sum(", "max(")) == [False]
