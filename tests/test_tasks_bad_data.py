"""Bad data files: every one is a single `judgekit: error:` line naming the file and row, never a traceback
and never a silently wrong problem (issue 12's reproductions, one test each)."""

from __future__ import annotations

import base64
import gzip
import json
import logging
import os
import pickle
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from judgekit.cli import main
from judgekit.errors import JudgekitError
from judgekit.tasks import get_task
from judgekit.tasks.livecodebench import encode_test_cases_pickled, env_flag

FIX = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parent.parent
STDIN_TESTS = [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]


def _jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _lcb_row(**over) -> dict:
    row = {"question_title": "t", "question_content": "q", "platform": "atcoder", "question_id": "x1",
           "starter_code": "", "public_test_cases": json.dumps(STDIN_TESTS), "private_test_cases": "[]",
           "metadata": "{}"}
    row.update(over)
    return row


def _load_error(task: str, path: str, **kw) -> str:
    with pytest.raises(JudgekitError) as err:
        get_task(task, **kw).load(data_file=path)
    return str(err.value)


def _cli_error(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("judgekit: error: ") and err.count("\n") == 1 and "Traceback" not in err
    return err


# --------------------------------------------------------------------------- files that are not what they say

def test_gsm8k_numeric_answer_names_file_and_row(tmp_path, capsys):
    path = _jsonl(tmp_path / "g.jsonl", [{"question": "q", "answer": "x\n#### 1"}, {"question": "q", "answer": 2}])
    err = _cli_error(capsys, ["tasks", "show", "gsm8k", "--data-file", path])
    assert f"{path}: row 2" in err and "'answer'" in err


def test_gzip_bytes_in_plain_jsonl(tmp_path):
    path = tmp_path / "g.jsonl"
    path.write_bytes(gzip.compress(b'{"question": "q", "answer": "#### 1"}\n'))
    assert "gzip-compressed" in _load_error("gsm8k", str(path))


def test_binary_jsonl_is_not_utf8(tmp_path):
    path = tmp_path / "g.jsonl"
    path.write_bytes(b"\xff\xfe\x00garbage")
    assert "not UTF-8" in _load_error("gsm8k", str(path))


def test_fake_parquet(tmp_path, capsys):
    path = tmp_path / "g.parquet"
    path.write_text("not parquet at all")
    err = _cli_error(capsys, ["tasks", "show", "gsm8k", "--data-file", str(path)])
    assert str(path) in err and "Parquet" in err


def test_fake_jsonl_gz(tmp_path):
    path = tmp_path / "g.jsonl.gz"
    path.write_text('{"question": "q"}\n')
    msg = _load_error("gsm8k", str(path))
    assert str(path) in msg and "gzip" in msg


def test_directory_as_data_file(tmp_path, capsys):
    err = _cli_error(capsys, ["tasks", "show", "gsm8k", "--data-file", str(tmp_path)])
    assert "is a directory" in err and "does not exist" not in err
    assert "is a directory" in _load_error("math500", str(tmp_path))


def test_row_that_is_not_an_object(tmp_path):
    path = _jsonl(tmp_path / "g.jsonl", [{"question": "q", "answer": "#### 1"}])
    Path(path).write_text(Path(path).read_text() + "[1, 2]\n")
    assert f"{path}: row 2 is a list" in _load_error("gsm8k", path)


# --------------------------------------------------------------------------- silent corruption, now loud

def test_gsm8k_null_question(tmp_path):
    path = _jsonl(tmp_path / "g.jsonl", [{"question": None, "answer": "#### 4"}])
    msg = _load_error("gsm8k", path)
    assert f"{path}: row 1" in msg and "'question'" in msg


def test_math500_null_answer(tmp_path):
    path = _jsonl(tmp_path / "m.jsonl", [{"problem": "1+1?", "answer": None}])
    msg = _load_error("math500", path)
    assert f"{path}: row 1" in msg and "'answer'" in msg


def test_math500_numeric_answer_is_text():
    task = get_task("math500")
    (p,) = [task.make_problem({"problem": "2+3?", "answer": 5}, "here", 0, "test")]
    assert p.reference == "5"


# --------------------------------------------------------------------------- LiveCodeBench rows

@pytest.mark.parametrize("over, needle", [
    ({"metadata": "{not json"}, "metadata is not JSON"),
    ({"metadata": "[1]"}, "metadata must be a JSON object"),
    ({"public_test_cases": json.dumps([{"input": "1"}])}, "needs string fields 'input' and 'output'"),
    ({"private_test_cases": "5"}, "private_test_cases is not a list of tests"),
    ({"public_test_cases": "{{not json"}, "public_test_cases is neither JSON nor"),
    ({"private_test_cases": "garbage!!"}, "private_test_cases is neither JSON nor"),
    ({"public_test_cases": encode_test_cases_pickled(STDIN_TESTS)}, "public_test_cases must be JSON"),
    ({"public_test_cases": json.dumps([{"input": "1", "output": "2", "testtype": "functional"}])},
     "functional tests need metadata.func_name"),
    ({"question_content": None}, "question_content must be a non-empty string"),
])
def test_livecodebench_bad_rows(tmp_path, over, needle, capsys):
    path = _jsonl(tmp_path / "test.jsonl", [_lcb_row(), _lcb_row(question_id="x2", **over)])
    msg = _load_error("livecodebench", path, trust_pickled_tests=False)
    assert f"{path}: row 2" in msg and needle in msg
    _cli_error(capsys, ["tasks", "show", "livecodebench", "--data-file", path])


def test_trust_flag_words(monkeypatch):
    for word in ("1", "true", "TRUE", "Yes", "on"):
        monkeypatch.setenv("JUDGEKIT_TRUST_LCB_PICKLE", word)
        assert env_flag("JUDGEKIT_TRUST_LCB_PICKLE") and get_task("livecodebench").trust_pickled_tests
    for word in ("", "0", "false", "No", "off"):
        monkeypatch.setenv("JUDGEKIT_TRUST_LCB_PICKLE", word)
        assert not get_task("livecodebench").trust_pickled_tests
    monkeypatch.setenv("JUDGEKIT_TRUST_LCB_PICKLE", "maybe")
    with pytest.raises(JudgekitError, match="JUDGEKIT_TRUST_LCB_PICKLE='maybe'"):
        get_task("livecodebench")


def test_refused_pickle_names_file_and_row(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    evil = base64.b64encode(zlib.compress(pickle.dumps(Evil()))).decode()
    path = _jsonl(tmp_path / "test.jsonl", [_lcb_row(), _lcb_row(question_id="x2", private_test_cases=evil)])
    msg = _load_error("livecodebench", path, trust_pickled_tests=True)
    assert f"{path}: row 2" in msg and "refusing to load" in msg and "system" in msg


def test_untrusted_pickle_warns_every_run_with_count(tmp_path, caplog):
    pickled = encode_test_cases_pickled(STDIN_TESTS)
    path = _jsonl(tmp_path / "test.jsonl", [_lcb_row(private_test_cases=pickled), _lcb_row(question_id="x2"),
                                             _lcb_row(question_id="x3", private_test_cases=pickled)])
    task = get_task("livecodebench", trust_pickled_tests=False)
    for _ in range(2):  # every load says it, not only the first of the process
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="judgekit.tasks.livecodebench"):
            problems = task.load(data_file=path)
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "2 of 3 problems" in warnings[0] and "JUDGEKIT_TRUST_LCB_PICKLE" in warnings[0]
    assert [p.meta["private_tests_skipped"] for p in problems] == [True, False, True]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="judgekit.tasks.livecodebench"):
        get_task("livecodebench", trust_pickled_tests=True).load(data_file=path)
    assert not caplog.records


# --------------------------------------------------------------------------- the command line

def test_broken_pipe_is_quiet(tmp_path):
    """`judgekit tasks show ... --json | head -c 600`: the reader leaves early; no traceback."""
    r, w = os.pipe()
    os.close(r)  # every write to w now fails with EPIPE: the reader has gone
    try:
        proc = subprocess.run([sys.executable, "-m", "judgekit", "tasks", "show", "livecodebench", "--data-file",
                               str(FIX / "livecodebench"), "--json"], stdout=w, stderr=subprocess.PIPE,
                              text=True, cwd=REPO, timeout=120)
    finally:
        os.close(w)
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    assert proc.returncode == 141
