"""The sandbox contains hostile programs and still runs correct ones; every case finishes in bounded time."""

from __future__ import annotations

import json
import os
import shutil
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
    assert res.wall_time < 7  # stopped by the CPU limit, before the 8 s wall clock (slack for a loaded machine)


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
        # the uid switch refuses (PermissionError); with the filesystem confined the file is not even there
        assert "PermissionError" in res.stdout or res.stdout.count("FileNotFoundError") == 3
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
    (1, "OSError: [Errno 28] No space left on device", False, 0.1, "file_size"),
])
def test_classify(rc, tail, timed_out, cpu, status):
    assert classify(rc, tail, timed_out, cpu, 2)[0] == status


def test_classify_disk_full():
    assert classify(1, "", False, 0.1, 2, disk_full=True) == ("file_size", "disk-space limit exceeded "
                                                                         "(the writable space is used up)")
    assert classify(0, "", False, 0.1, 2, disk_full=True)[0] == "ok"  # a program may fill it and still succeed
    assert classify(None, "", True, None, 2, disk_full=True)[0] == "timeout"
    assert classify(-signal.SIGKILL, "", False, 3.0, 2, disk_full=True)[0] == "timeout"  # the CPU limit killed it
    assert classify(1, "MemoryError\n", False, 0.1, 2, disk_full=True)[0] == "memory"


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


# ---- the confined filesystem (needs root and mount namespaces) ---------------------------------------------

@pytest.fixture(scope="module")
def confined():
    layers = run_program("pass").isolation
    if "fs" not in layers:
        pytest.skip("filesystem confinement needs root, mount namespaces and pivot_root "
                    f"(layers available here: {layers})")
    return layers


def test_private_tmp_places_are_fresh_and_vanish(confined):
    tag = f"judgekit-fs-{uuid.uuid4().hex}"
    host_marker = Path("/tmp") / f"{tag}-host"
    host_marker.write_text("host file")
    try:
        code = (f"import os, sys\nfor d in ('/tmp', '/var/tmp', '/dev/shm'):\n"
                f"    open(os.path.join(d, {tag!r}), 'w').write('x' * 1000)\n"
                f"    print(d, sorted(n for n in os.listdir(d) if not n.startswith('judgekit-sbx-')\n"
                f"                    and not sys.prefix.startswith(os.path.join(d, n) + os.sep)))\n"
                f"print(os.path.exists({str(host_marker)!r}))\n")
        res = run_program(code)
        assert res.status == "ok", res.stderr
        assert res.stdout.splitlines() == [f"/tmp [{tag!r}]", f"/var/tmp [{tag!r}]", f"/dev/shm [{tag!r}]",
                                           "False"]  # only its own file; the host's /tmp is not shown
        for d in ("/tmp", "/var/tmp", "/dev/shm"):
            assert not (Path(d) / tag).exists()
    finally:
        host_marker.unlink()


def test_writing_outside_the_working_directory_fails(confined):
    import sys
    targets = ["/x", "/etc/x", "/usr/x", "/usr/lib/x", "/root/x", "/var/x", "/home/x", "/work/x",
               os.path.join(sys.prefix, "x"), os.path.join(sys.base_prefix, "x"), os.path.join(os.getcwd(), "x"),
               str(Path.home() / "x")]
    code = (f"import os\nfor t in {targets!r}:\n    try:\n        open(t, 'w').write('x')\n        print('wrote', t)\n"
            "    except OSError as e:\n        print('refused', type(e).__name__)\n"
            "try:\n    os.mkdir('/tmp/../newdir')\n    print('wrote /newdir')\nexcept OSError as e:\n    print('refused')\n"
            "open('here.txt', 'w').write('ok')\nprint(open('here.txt').read())\n")
    res = run_program(code)
    assert res.status == "ok", res.stderr
    assert "wrote" not in res.stdout
    assert res.stdout.count("refused") == len(targets) + 1 and res.stdout.endswith("ok\n")
    assert not any(os.path.exists(t) for t in targets) and not os.path.exists("/newdir")


def test_filling_the_writable_space_is_stopped_and_reported(confined):
    usage_before = shutil.disk_usage("/tmp").free
    code = ("import os\nchunk = b'0' * (1 << 20)\ni = 0\n"
            "while True:\n"
            "    for d in ('.', '/tmp', '/dev/shm', '/var/tmp'):\n"
            "        with open(os.path.join(d, 'f%d' % i), 'wb') as f:\n            f.write(chunk)\n"
            "        i += 1\n")
    start = time.monotonic()
    res = run_program(code, limits=SandboxLimits(timeout_s=20, disk_mb=16))
    assert time.monotonic() - start < 10
    assert res.status == "file_size" and "disk-space" in res.message
    assert "No space left on device" in res.stderr
    # many empty files: the inode bound stops them too
    res = run_program("import os\nfor i in range(10 ** 6):\n    open('e%d' % i, 'w').close()\n",
                      limits=SandboxLimits(timeout_s=20, disk_mb=16))
    assert res.status == "file_size"
    # a program that swallows the error is stopped all the same: it could never write past the bound
    res = run_program("n = 0\ntry:\n    while True:\n        open('g%d' % n, 'wb').write(b'1' * (1 << 20))\n"
                      "        n += 1\nexcept OSError:\n    print(n)\n", limits=SandboxLimits(disk_mb=16))
    assert res.status == "ok" and int(res.stdout) <= 16
    # nothing reached the host's disk (tmpfs in the run's own mount namespace, freed with it)
    assert usage_before - shutil.disk_usage("/tmp").free < 200 << 20


def test_caller_home_and_working_directory_are_out_of_sight(confined):
    secret = f"secret-{uuid.uuid4().hex}"
    files = [Path.home() / f".judgekit-test-{secret}", Path.cwd() / f".judgekit-test-{secret}"]
    for f in files:
        f.write_text(secret)
        f.chmod(0o644)  # world-readable: only the confinement hides it
    try:
        code = (f"import os\nfor d in {[str(f.parent) for f in files]!r}:\n"
                "    try:\n        print(sorted(os.listdir(d)))\n    except OSError as e:\n        print(type(e).__name__)\n"
                f"for f in {[str(f) for f in files]!r}:\n"
                "    try:\n        print(open(f).read())\n    except OSError as e:\n        print(type(e).__name__)\n")
        res = run_program(code)
        assert res.status == "ok", res.stderr
        assert secret not in res.stdout
        assert "pyproject.toml" not in res.stdout and "judgekit" not in res.stdout
        assert res.stdout.splitlines()[-2:] == ["FileNotFoundError", "FileNotFoundError"]
    finally:
        for f in files:
            f.unlink()


def test_correct_programs_still_pass_confined(confined):
    res = run_program("import tempfile, os\nwith tempfile.TemporaryDirectory() as d:\n"
                      "    p = os.path.join(d, 'a')\n    open(p, 'w').write('42')\n    print(open(p).read())\n"
                      "with tempfile.NamedTemporaryFile('w+') as f:\n    f.write('x')\n    f.flush()\n"
                      "    print(os.path.getsize(f.name))\n"
                      "import subprocess, sys\nprint(subprocess.run([sys.executable, '-c', 'print(7)'], "
                      "capture_output=True, text=True).stdout.strip())\n")
    assert res.status == "ok", res.stderr
    assert res.stdout == "42\n1\n7\n"
    pytest.importorskip("numpy")
    res = run_program("import numpy as np\nprint(int(np.arange(10).sum()))\n")
    assert res.status == "ok" and res.stdout == "45\n", res.stderr


def test_without_the_fs_layer_it_says_so_once(confined, monkeypatch, caplog):
    import judgekit.sandbox as sb
    monkeypatch.setattr(sb, "_CONFINE_FS", False)
    res = run_program("print(1)")
    assert res.ok and "fs" not in res.isolation and "uid" in res.isolation
    monkeypatch.setattr(sb, "_CONFINE_FS", True)
    monkeypatch.setattr(sb, "_warned", set())
    monkeypatch.setattr(sb, "_fs_plan", lambda: None)  # as on a machine that cannot pivot into a new root
    with caplog.at_level("WARNING", logger="judgekit.sandbox"):
        assert "fs" not in run_program("pass").isolation and "fs" not in run_program("pass").isolation
    assert len([r for r in caplog.records if "cannot confine the filesystem" in r.message]) == 1


def test_fs_plan_shows_the_interpreter_but_not_the_callers_files():
    import sys
    from judgekit.sandbox import _fs_plan
    plan = _fs_plan()
    if plan is None:
        pytest.skip("no pivot_root on this architecture")
    binds = [p for kind, p, _ in plan if kind == "bind"]
    assert "/usr" in binds or os.path.islink("/usr")
    real = os.path.realpath(sys.base_prefix)
    assert any(real == b or real.startswith(b + "/") for b in binds)
    cwd = os.path.realpath(os.getcwd())
    assert not any(cwd == b or cwd.startswith(b + "/") for b in binds)
    assert not any(b in ("/", "/tmp", "/root", "/home", "/work") for b in binds)


def test_cli_leaves_nothing_on_the_host(confined, tmp_path, capsys):
    tag = f"judgekit-cli-{uuid.uuid4().hex}"
    prog = tmp_path / "prog.py"
    prog.write_text(f"open('/tmp/{tag}.txt', 'w').write('x')\nopen('/dev/shm/{tag}', 'wb').write(b'0' * (8 << 20))\n"
                    "import os\nprint(os.listdir('/root'), os.path.exists('/work/main/README.md'))\n")
    rc = main(["sandbox", "run", str(prog), "--timeout", "5", "--disk-mb", "32", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["status"] == "ok" and "fs" in out["isolation"]
    assert not Path(f"/tmp/{tag}.txt").exists() and not Path(f"/dev/shm/{tag}").exists()
    assert "False" in out["stdout"] and ".bashrc" not in out["stdout"]
    assert main(["sandbox", "run", str(prog), "--timeout", "5", "--disk-mb", "4", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["status"] == "file_size"


def test_not_root_the_filesystem_is_confined_in_a_user_namespace():
    """Run the sandbox as an ordinary user (nobody, through setpriv) with a system Python: where the kernel
    allows unprivileged user namespaces, the filesystem layer still applies."""
    import subprocess
    import sys
    repo = Path(__file__).resolve().parents[1]
    py = shutil.which("python3", path="/usr/bin:/bin")
    if not ROOT or not shutil.which("setpriv") or not py:
        pytest.skip("needs root (to become nobody), setpriv and a system python3")
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    if subprocess.run(nobody + [py, "-c", f"import os; os.listdir({str(repo)!r})"], capture_output=True).returncode:
        pytest.skip("the checkout is not readable by an ordinary user")
    if subprocess.run(nobody + ["unshare", "-Urm", "true"], capture_output=True).returncode:
        pytest.skip("no unprivileged user + mount namespaces on this kernel")
    tag = f"judgekit-nobody-{uuid.uuid4().hex}"
    code = (f"import json, sys\nsys.path.insert(0, {str(repo)!r})\nfrom judgekit.sandbox import run_program\n"
            f"r = run_program(\"import os\\nopen('/tmp/{tag}', 'w').write('x')\\nprint(sorted(os.listdir('/')))\\n"
            f"try:\\n    open('/usr/{tag}', 'w')\\nexcept OSError as e:\\n    print(type(e).__name__)\\n\")\n"
            "print(json.dumps(r.to_dict()))\n")
    out = subprocess.run(nobody + [py, "-c", code], capture_output=True, text=True, cwd="/", timeout=60)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout.splitlines()[-1])
    assert res["status"] == "ok" and {"userns", "mntns", "fs"} <= set(res["isolation"]), res
    listing, refused = res["stdout"].splitlines()
    assert "root" not in listing and "home" not in listing and refused == "OSError"
    assert not Path(f"/tmp/{tag}").exists() and not Path(f"/usr/{tag}").exists()


# ---- no sandbox directory outlives its supervisor -----------------------------------------------------------

def _sbx_entries(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.startswith("judgekit-sbx-"))


def _start_supervisor(tmp_path: Path, tmpdir: Path):
    """`judgekit sandbox run` of a sleeping program, as a subprocess whose temporary directory is `tmpdir`;
    returns once the program runs (its working directory exists)."""
    import subprocess
    import sys
    prog = tmp_path / "sleep.py"
    prog.write_text("import time\ntime.sleep(60)\n")
    repo = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen([sys.executable, "-m", "judgekit", "sandbox", "run", str(prog), "--timeout", "60"],
                            cwd=repo, env={**os.environ, "TMPDIR": str(tmpdir), "PYTHONPATH": str(repo)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        runs = [p for p in tmpdir.glob(f"judgekit-sbx-run-{proc.pid}-*") if p.is_dir()]
        # the working directory appears only to root (0o711 run directory): wait for the io directory
        if runs and any(True for _ in runs[0].glob("judgekit-sbx-io-*")):
            time.sleep(0.5)  # the launcher is starting the program
            return proc
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("the sandbox supervisor did not start its program in time")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_supervisor_leaves_no_sandbox_directory(tmp_path, monkeypatch, sig):
    import tempfile
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    proc = _start_supervisor(tmp_path, tmpdir)
    assert _sbx_entries(tmpdir)  # its run directory, with the program's private and working directories
    proc.send_signal(sig)
    assert proc.wait(timeout=30) == -sig
    deadline = time.monotonic() + 15  # the reaper removes it once the supervisor is gone
    while _sbx_entries(tmpdir) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _sbx_entries(tmpdir) == []
    # Where even the reaper was killed, the next run sweeps a run directory whose owner is dead.
    (tmpdir / "judgekit-sbx-run-999999999-x" / "judgekit-sbx-io-y").mkdir(parents=True)
    import judgekit.sandbox as sb
    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))
    monkeypatch.setattr(sb, "_run_dir", None)  # as in a fresh process
    assert run_program("print(1)").stdout == "1\n"
    own = [n for n in _sbx_entries(tmpdir) if n.startswith(f"judgekit-sbx-run-{os.getpid()}-")]
    assert _sbx_entries(tmpdir) == own and len(own) == 1  # only this live process's own run directory
    assert [p.name for p in (tmpdir / own[0]).iterdir()] == []  # and each run removed its directories
    sb._remove_run_dir(str(tmpdir / own[0]))
    monkeypatch.setattr(sb, "_run_dir", None)


def test_a_live_processs_run_directory_is_not_swept(tmp_path):
    from judgekit.stale import sweep_stale
    live = tmp_path / f"judgekit-sbx-run-{os.getppid()}-abc"
    dead = tmp_path / "judgekit-sbx-run-999999999-abc"  # above any pid_max
    live.mkdir()
    dead.mkdir()
    assert sweep_stale(tmp_path, "judgekit-sbx-run-") == [dead]
    assert live.is_dir() and not dead.exists()


def test_removing_a_tree_never_changes_its_parents_mode(tmp_path):
    """The clean-up chmods what it must inside the tree, never the tree's parent (the shared temp directory):
    neither for a tree already removed by someone else nor for one with an unreadable directory inside."""
    import stat

    import judgekit.sandbox as sb

    parent = tmp_path / "shared"
    parent.mkdir()
    parent.chmod(0o1777)
    tree = parent / "judgekit-sbx-x"
    (tree / "locked" / "deep").mkdir(parents=True)
    (tree / "locked").chmod(0o000)
    sb._remove_tree(str(tree))
    assert not tree.exists()
    sb._remove_tree(str(tree))  # gone already: nothing to do, and nothing else touched
    assert stat.S_IMODE(parent.stat().st_mode) == 0o1777
