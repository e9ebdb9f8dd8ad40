"""The sandbox contains hostile programs and still runs correct ones; every case finishes in bounded time."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from pathlib import Path

import pytest

from judgekit.cli import main
from judgekit.sandbox import SandboxLimits, SandboxResult, classify, run_many, run_program

ROOT = os.geteuid() == 0
FAST = SandboxLimits(timeout_s=3.0)


def test_correct_program_passes_with_stdin():
    res = run_program("import sys\nprint(sum(map(int, sys.stdin.read().split())))", stdin="1 2 3\n")
    assert res.status == "ok" and res.returncode == 0
    assert res.stdout == "6\n" and res.stderr == ""
    assert 0 < res.wall_time < 5
    d = res.to_dict()
    assert d["status"] == "ok" and json.dumps(d)


def test_error_exit_is_reported():
    res = run_program("raise ValueError('boom')")
    assert res.status == "error" and res.returncode == 1
    assert "ValueError: boom" in res.stderr


def test_infinite_loop_times_out_in_bounded_time():
    start = time.monotonic()
    res = run_program("while True:\n    pass\n", limits=SandboxLimits(timeout_s=1.5))
    assert res.status == "timeout"
    assert time.monotonic() - start < 6


def test_cpu_limit_is_reported_as_timeout():
    res = run_program("while True:\n    pass\n", limits=SandboxLimits(timeout_s=8, cpu_s=1))
    assert res.status == "timeout"
    assert "CPU" in res.message
    assert res.wall_time < 4


def test_fork_bomb_is_contained_and_whole_tree_killed():
    start = time.monotonic()
    res = run_program("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
                      limits=SandboxLimits(timeout_s=2.0, max_processes=16))
    assert res.status in ("timeout", "error")
    assert time.monotonic() - start < 10
    # the caller can still start processes and a correct program still passes
    assert run_program("print('alive')").stdout == "alive\n"


def test_background_process_that_left_the_group_is_killed(tmp_path):
    marker = Path("/tmp") / f"judgekit-escape-{uuid.uuid4().hex}"
    child = f"import time; time.sleep(1.0); open({str(marker)!r}, 'w').write('escaped')"
    code = ("import subprocess, sys\n"
            f"subprocess.Popen([sys.executable, '-c', {child!r}], start_new_session=True)\n"
            "print('started')\n")
    res = run_program(code)
    assert res.status == "ok" and res.stdout == "started\n"
    time.sleep(1.6)
    assert not marker.exists()


def test_allocating_10gb_is_reported_as_memory():
    res = run_program("x = bytearray(10 * 1024 ** 3)\nprint('allocated')", limits=SandboxLimits(memory_mb=512))
    assert res.status == "memory"
    assert "allocated" not in res.stdout


def test_writing_1gb_file_hits_file_size_limit():
    code = "with open('big.bin', 'wb') as f:\n    for _ in range(1024):\n        f.write(b'0' * (1 << 20))\n"
    res = run_program(code, limits=SandboxLimits(file_size_mb=8))
    assert res.status == "file_size"


def test_huge_stdout_is_capped():
    res = run_program("import sys\nfor _ in range(2000):\n    sys.stdout.write('x' * 1000)\n",
                      limits=SandboxLimits(max_output_bytes=10_000))
    assert res.truncated and len(res.stdout) == 10_000


@pytest.mark.skipif(not ROOT, reason="outside files are protected by the uid switch, available only as root")
def test_cannot_delete_files_outside_workdir(tmp_path):
    victim_dir = Path("/tmp") / f"judgekit-victim-{uuid.uuid4().hex}"
    victim_dir.mkdir(mode=0o755)
    victim = victim_dir / "precious.txt"
    victim.write_text("keep me")
    try:
        code = (f"import os, shutil\nfor f in (lambda: os.remove({str(victim)!r}), "
                f"lambda: shutil.rmtree({str(victim_dir)!r}), lambda: open({str(victim)!r}, 'w')):\n"
                "    try:\n        f()\n        print('done')\n    except Exception as e:\n"
                "        print(type(e).__name__)\n")
        res = run_program(code)
        assert "done" not in res.stdout
        assert "PermissionError" in res.stdout
        assert victim.read_text() == "keep me"
    finally:
        victim.unlink(missing_ok=True)
        victim_dir.rmdir()


def test_network_is_unreachable():
    res = run_program("import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=2)\nprint('connected')")
    if "netns" not in res.isolation:
        pytest.skip("no network namespace on this machine")
    assert res.status == "error"
    assert "connected" not in res.stdout
    assert "OSError" in res.stderr


def test_caller_environment_is_not_visible(monkeypatch):
    secret = f"s3cret-{uuid.uuid4().hex}"
    monkeypatch.setenv("JUDGEKIT_TEST_SECRET", secret)
    code = (f"import os\nprint(dict(os.environ))\n"
            f"try:\n    print(open('/proc/{os.getpid()}/environ', 'rb').read())\n"
            f"except Exception as e:\n    print(type(e).__name__)\n")
    res = run_program(code)
    assert res.status == "ok"
    assert secret not in res.stdout
    assert "JUDGEKIT_TEST_SECRET" not in res.stdout


def test_cannot_kill_the_caller():
    me = os.getpid()
    code = (f"import os, signal\nattempts = [lambda: os.kill({me}, signal.SIGKILL), "
            f"lambda: os.kill(os.getppid(), signal.SIGKILL), lambda: os.killpg({os.getpgid(0)}, signal.SIGKILL), "
            "lambda: os.kill(-1, signal.SIGKILL)]\n"
            "for a in attempts:\n    try:\n        a()\n        print('sent')\n"
            "    except Exception as e:\n        print(type(e).__name__)\n")
    res = run_program(code)
    assert res.status in ("ok", "killed")  # kill(-1) may hit the program itself
    os.kill(me, 0)  # still alive
    if res.status == "ok":
        assert res.stdout.count("sent") == 0


def test_run_many_preserves_order_and_isolates_failures():
    jobs = [(f"print({i} * {i})", None) for i in range(6)] + [("raise SystemExit(3)", None),
                                                               ("import sys; print(sys.stdin.read())", "in")]
    results = run_many(jobs, limits=FAST, workers=3)
    assert [r.stdout.strip() for r in results[:6]] == [str(i * i) for i in range(6)]
    assert results[6].status == "error" and results[6].returncode == 3
    assert results[7].stdout.strip() == "in"
    assert run_many([]) == []


@pytest.mark.parametrize(("rc", "tail", "timed_out", "cpu", "status"), [
    (0, "", False, 0.1, "ok"),
    (1, "Traceback\nMemoryError\n", False, 0.1, "memory"),
    (1, "OSError: [Errno 27] File too large", False, 0.1, "file_size"),
    (-signal.SIGXCPU, "", False, 2.0, "timeout"),
    (-signal.SIGKILL, "", False, 3.0, "timeout"),
    (-signal.SIGKILL, "", False, 0.1, "killed"),
    (-signal.SIGXFSZ, "", False, 0.1, "file_size"),
    (-signal.SIGSEGV, "", False, 0.1, "killed"),
    (None, "", True, None, "timeout"),
    (None, "", False, None, "sandbox_error"),
    (2, "SyntaxError", False, 0.1, "error"),
])
def test_classify(rc, tail, timed_out, cpu, status):
    assert classify(rc, tail, timed_out, cpu, 2)[0] == status


def test_result_dataclass_roundtrip():
    r = SandboxResult(status="ok", returncode=0, stdout="a", stderr="", wall_time=0.1)
    assert r.ok and r.to_dict()["stdout"] == "a"


def test_cli_sandbox_run_json(tmp_path, capsys):
    prog = tmp_path / "prog.py"
    prog.write_text("print(input()[::-1])\n")
    stdin = tmp_path / "in.txt"
    stdin.write_text("abc\n")
    rc = main(["sandbox", "run", str(prog), "--stdin", str(stdin), "--timeout", "5", "--memory-mb", "512", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["status"] == "ok" and out["stdout"] == "cba\n"
    for key in ("status", "returncode", "stdout", "stderr", "wall_time"):
        assert key in out


def test_cli_sandbox_run_reports_timeout_and_missing_file(tmp_path, capsys):
    prog = tmp_path / "loop.py"
    prog.write_text("while True: pass\n")
    rc = main(["sandbox", "run", str(prog), "--timeout", "1"])
    assert rc == 1 and "status: timeout" in capsys.readouterr().out
    assert main(["sandbox", "run", str(tmp_path / "missing.py")]) == 2
    assert "does not exist" in capsys.readouterr().err
