"""Run model-written programs in isolation: the only place judgekit executes generated code.

Every program runs as its own process tree, started by a tiny trusted launcher (`python -S -c _LAUNCHER`)
that sets up the isolation layers below and reports what it achieved on a private status pipe. The layers,
and what happens where the OS refuses one:

1. **Own session / process group** (`start_new_session=True`): the caller can `killpg` the whole group.
   Always available.
2. **New PID namespace** (`unshare(CLONE_NEWPID)`): the launcher forks a small init shim (pid 1 of the
   namespace) which forks the program. The caller is invisible from inside, and when the shim exits the
   kernel kills every process left in the namespace - even ones that called `setsid()` to leave the
   process group. Needs root (CAP_SYS_ADMIN) or unprivileged user namespaces; otherwise skipped.
3. **New network namespace** (`unshare(CLONE_NEWNET)`): only a downed loopback exists, so sockets cannot
   reach anything. Same requirements as 2; when unavailable a warning is logged once and the program runs
   with the host network.
4. **Different uid** (only when the caller is root): the program runs as a fresh, unused uid/gid
   (one per run), with no supplementary groups. It therefore cannot signal the caller (root), cannot read
   `/proc/<caller>/environ`, cannot delete root-owned files outside its working directory, and
   `RLIMIT_NPROC` counts only its own processes (the kernel ignores `RLIMIT_NPROC` for root, so without this
   a fork bomb would only be stopped by the timeout). After each run every process of that uid is killed.
   When the caller is not root this layer is skipped (the program runs as the caller's user; then a user
   namespace + PID namespace, if the kernel allows them, still hides the caller's pid). A warning says so once.
5. **Resource limits** set in the child before `exec`: CPU seconds (`RLIMIT_CPU`, reported as "timeout"),
   address space (`RLIMIT_AS`, a failed allocation is reported as "memory"), file size (`RLIMIT_FSIZE`,
   reported as "file_size"; it also bounds the captured stdout/stderr files), processes (`RLIMIT_NPROC`),
   open files, no core dumps. Always available on Linux.
6. **Wall-clock timeout** enforced by the launcher (kills the shim, hence the namespace) and, as a backstop,
   by the caller (kills the launcher's process group).
7. **Fresh temporary working directory** (owned by the sandbox uid, removed afterwards; it lives in one
   run directory per calling process, ``$TMPDIR/judgekit-sbx-run-<pid>-*``, removed at exit, by a small
   reaper process as soon as the caller dies however it dies (SIGTERM, SIGKILL), and, should the reaper
   have died too, swept by the next process to start a sandbox) and a **scrubbed
   environment** (minimal PATH/LANG, HOME=TMPDIR=workdir, single-threaded BLAS); nothing of the caller's
   environment is passed on.
8. **Confined filesystem** ("fs", in a private mount namespace "mntns"; as root, or for an ordinary user
   inside the user namespace of layer 2 where the kernel allows unprivileged user namespaces): the
   program runs in a new root (`pivot_root`) that holds only read-only, nosuid binds of the system
   directories (`/usr`, `/etc`, `/lib*`, `/bin`, `/sbin`) and of the interpreter's prefixes and
   site-packages, a few device nodes, and a `/proc` of its own PID namespace. The caller's home, working
   directories, projects and data are simply not there. `/tmp`, `/var/tmp`, `/dev/shm` and the working
   directory (`/tmp/judgekit-sbx-*`) all live on one fresh tmpfs of `SandboxLimits.disk_mb` MiB (and a
   bounded number of inodes), so everything a program writes together is bounded, never reaches the
   host's disk and vanishes with the run; using it up is reported as "file_size". When this layer is
   refused (no mount namespace, no `pivot_root`) the result's `isolation` lacks "fs", a warning
   says so once, and programs can read world-readable files and write to world-writable places (within
   the file-size limit), as before.

Not covered: `/etc` is visible (read-only; world-readable configuration such as `/etc/passwd`), and so are
the interpreter's installed packages. The tmpfs is RAM: `disk_mb` per concurrent run comes out of the
machine's memory, outside `RLIMIT_AS`. No seccomp filter and no cgroup: kernel attack surface and memory
pressure from many parallel runs are not limited further. Use a container or VM for stronger needs.
"""

from __future__ import annotations

import atexit
import functools
import json
import logging
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from dataclasses import asdict, dataclass, field
from typing import Any

from judgekit.stale import sweep_stale

log = logging.getLogger(__name__)

STATUSES = ("ok", "error", "timeout", "memory", "file_size", "killed", "sandbox_error")


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandboxed run. `cpu_s=None` means "same as the wall-clock timeout"."""

    timeout_s: float = 10.0
    cpu_s: float | None = None
    memory_mb: int = 1024
    file_size_mb: int = 64
    max_processes: int = 32
    network: bool = False
    disk_mb: int = 128  # all writable space together: working directory, /tmp, /var/tmp, /dev/shm (RAM-backed)
    max_output_bytes: int = 1_000_000  # captured stdout/stderr are cut to this size each

    def effective_cpu_s(self) -> int:
        cpu = self.cpu_s if self.cpu_s is not None else self.timeout_s
        return max(1, int(-(-cpu // 1)))  # ceil, at least one second


@dataclass
class SandboxResult:
    """What happened to one program. `status` is one of STATUSES; `isolation` lists the layers that applied."""

    status: str
    returncode: int | None
    stdout: str
    stderr: str
    wall_time: float
    cpu_time: float | None = None
    signal: int | None = None
    truncated: bool = False
    isolation: list[str] = field(default_factory=list)
    message: str = ""  # a human-readable reason for a non-ok status

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# The trusted launcher. Runs with `python -I -S -c`; argv[1] is a JSON config. It writes JSON lines to the
# status fd: first the isolation layers it set up, then the program's result. Kept dependency-free and
# single-threaded (unshare(CLONE_NEWUSER) refuses multi-threaded processes).
_LAUNCHER = r'''
import ctypes, json, os, resource, signal, sys, time
cfg = json.loads(sys.argv[1])
sfd = cfg["status_fd"]
def report(**kw):
    os.write(sfd, (json.dumps(kw) + "\n").encode())
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: die with the caller
if os.getppid() != cfg["caller_pid"]:
    os._exit(1)
NEWUSER, NEWPID, NEWNET = 0x10000000, 0x20000000, 0x40000000
root = os.geteuid() == 0
uid, gid = os.getuid(), os.getgid()
def unshare(flags):
    if libc.unshare(flags) != 0:
        return False
    if flags & NEWUSER:
        for name, text in (("setgroups", "deny"), ("uid_map", "%d %d 1" % (uid, uid)), ("gid_map", "%d %d 1" % (gid, gid))):
            with open("/proc/self/" + name, "w") as f:
                f.write(text)
    return True
NEWNS = 0x00020000
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
def mount(src, target, fstype, flags, data):
    enc = lambda x: None if x is None else x.encode()
    if libc.mount(enc(src), enc(target), enc(fstype), flags, enc(data)) != 0:
        raise OSError(ctypes.get_errno(), "mount %s" % target)
def reveal(paths, tops, stage_dir):
    """In a private mount namespace, show the interpreter's directories that sit under a directory the
    sandbox uid cannot traverse (e.g. /root/.pyenv): hide that directory under a tmpfs and bind only them."""
    mount(None, "/", None, MS_REC | MS_PRIVATE, None)
    stages = []
    for i, p in enumerate(paths):
        st = os.path.join(stage_dir, str(i))
        os.mkdir(st, 0o700)
        mount(p, st, None, MS_BIND | MS_REC, None)
        stages.append(st)
    for t in tops:
        mount("tmpfs", t, "tmpfs", 0, "mode=755,size=1m")
    for p, st in zip(paths, stages):
        os.makedirs(p, 0o755, exist_ok=True)
        mount(st, p, None, MS_BIND | MS_REC, None)
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MNT_DETACH = 1, 2, 4, 8, 32, 2
KEEP = ((1, 1), (2, 2), (4, 4), (8, 8), (1024, 1024), (2048, 2048), (4096, 1 << 21))  # statvfs ST_* -> MS_*
def bind_ro(src, dst):
    mount(src, dst, None, MS_BIND, None)
    keep = 0
    for st, ms in KEEP:  # flags the source mount already has must be kept on remount
        if os.statvfs(src).f_flag & st:
            keep |= ms
    mount(None, dst, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | keep, None)
def build_root(fs, suid):
    """A new root in the private mount namespace (not yet entered): an empty tmpfs holding read-only binds of
    the system and interpreter directories, and one size-bounded tmpfs shared by /tmp, /var/tmp, /dev/shm
    and the working directory. Everything else of the host (homes, projects, data) simply is not there."""
    mount(None, "/", None, MS_REC | MS_PRIVATE, None)
    new, rw = os.path.join(cfg["stage_dir"], "root"), os.path.join(cfg["stage_dir"], "rw")
    os.mkdir(new, 0o755)
    os.mkdir(rw, 0o700)
    mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=1m,nr_inodes=1024")
    mount("tmpfs", rw, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=%dk,nr_inodes=%d" % (fs["disk_kb"], fs["inodes"]))
    for sub, target in (("tmp", "/tmp"), ("var_tmp", "/var/tmp"), ("shm", "/dev/shm")):
        os.mkdir(os.path.join(rw, sub))
        os.chmod(os.path.join(rw, sub), 0o1777)
        os.makedirs(new + target, 0o755, exist_ok=True)
        mount(os.path.join(rw, sub), new + target, None, MS_BIND, None)
    for kind, path, target in fs["plan"]:
        if kind == "link":
            os.makedirs(os.path.dirname(new + path), 0o755, exist_ok=True)
            os.symlink(target, new + path)
        else:
            os.makedirs(new + path, 0o755, exist_ok=True)
            bind_ro(path, new + path)
    for name in ("null", "zero", "full", "random", "urandom"):
        open(new + "/dev/" + name, "w").close()
        mount("/dev/" + name, new + "/dev/" + name, None, MS_BIND, None)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, new + "/dev/" + name)
    os.mkdir(new + "/proc", 0o555)
    work = "/tmp/" + os.path.basename(cfg["workdir"])
    os.mkdir(new + work, 0o700)
    with open(cfg["script"], "rb") as src, open(new + work + "/main.py", "wb") as dst:
        dst.write(src.read())
    if suid is not None:
        os.chown(new + work, suid, suid)
    return new, work
OLD_ROOT = "/.old-root"
def enter_root(new, pidns):
    if not pidns:  # no fresh /proc can be mounted for the program's namespace: show the host's
        mount("/proc", new + "/proc", None, MS_BIND | MS_REC, None)
    os.mkdir(new + OLD_ROOT, 0o700)
    if libc.syscall(cfg["pivot_root_nr"], new.encode(), (new + OLD_ROOT).encode()) != 0:
        raise OSError(ctypes.get_errno(), "pivot_root")
    os.chdir("/")
def finish_root():
    """Drop the old root and make the new one read-only. Called after the fresh /proc is mounted: inside a
    user namespace the kernel allows a new proc mount only while another proc mount is visible."""
    if libc.umount2(OLD_ROOT.encode(), MNT_DETACH) != 0:
        raise OSError(ctypes.get_errno(), "umount old root")
    os.rmdir(OLD_ROOT)
    mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None)
want_net = not cfg["network"]
notes = []
suid = cfg["uid"] if root else None
mntns = False
newroot = None
if root and cfg["fs"]:
    try:
        if libc.unshare(NEWNS) != 0:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
        mntns = True
        newroot, inner_work = build_root(cfg["fs"], suid)
    except OSError as e:
        notes.append("cannot confine the filesystem (%s)" % e)
if root and cfg["reveal"] and newroot is None:
    try:
        if not mntns and libc.unshare(NEWNS) != 0:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
        mntns = True
        reveal(cfg["reveal"], cfg["reveal_tops"], cfg["stage_dir"])
    except OSError as e:
        notes.append("cannot expose the interpreter to another uid (%s); running as root" % e)
        suid = None
if root:
    tries = [(NEWPID | NEWNET, ["pidns", "netns"]), (NEWPID, ["pidns"]), (NEWNET, ["netns"])]
else:
    tries = [(NEWUSER | NEWPID | NEWNET, ["userns", "pidns", "netns"]), (NEWUSER | NEWPID, ["userns", "pidns"])]
    if cfg["fs"]:  # a user namespace also allows a private mount namespace and so the confined filesystem
        tries = [(flags | NEWNS, names) for flags, names in tries] + tries
layers = ["session"]
for flags, names in tries:
    if not want_net:
        flags &= ~NEWNET
        names = [n for n in names if n != "netns"]
    if flags and unshare(flags):
        layers += names
        if flags & NEWNS:
            mntns = True
            try:
                newroot, inner_work = build_root(cfg["fs"], None)
            except OSError as e:
                notes.append("cannot confine the filesystem (%s)" % e)
        break
pidns = "pidns" in layers
if newroot is not None:
    try:
        enter_root(newroot, pidns)
        if not pidns:
            finish_root()
    except OSError as e:  # half-way through the switch: no safe way to go on
        report(layers=layers, notes=["cannot enter the confined filesystem (%s)" % e])
        os._exit(1)
    cfg["workdir"], cfg["script"] = inner_work, inner_work + "/main.py"
    cfg["env"]["HOME"] = cfg["env"]["TMPDIR"] = inner_work
if mntns:
    layers.append("mntns")
if newroot is not None:
    layers.append("fs")
if suid is not None:
    layers.append("uid")
layers.append("rlimits")
report(layers=layers, notes=notes)
lim = cfg["limits"]
def run_program():
    if pidns:
        os.setsid()  # own group inside the namespace: kill(0, ...) cannot reach the launcher
    R = resource
    for res, val in ((R.RLIMIT_CORE, 0), (R.RLIMIT_CPU, (lim["cpu"], lim["cpu"] + 1)), (R.RLIMIT_AS, lim["as"]),
                     (R.RLIMIT_FSIZE, lim["fsize"]), (R.RLIMIT_NPROC, lim["nproc"]), (R.RLIMIT_NOFILE, 256)):
        soft, hard = val if isinstance(val, tuple) else (val, val)
        R.setrlimit(res, (soft, hard))
    if suid is not None:
        os.setgroups([])
        os.setgid(suid)
        os.setuid(suid)
    os.chdir(cfg["workdir"])
    os.close(sfd)
    os.execve(cfg["python"], [cfg["python"], "-B", cfg["script"]], cfg["env"])
def shim():
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)
    if newroot is not None and pidns:  # a /proc that shows only this namespace's processes
        try:
            mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
        except OSError:
            pass  # the program then runs without /proc (Python does not need it)
        try:
            finish_root()
        except OSError as e:
            os.write(2, ("sandbox: could not start program: %r\n" % (e,)).encode())
            os._exit(127)
    child = os.fork()
    if child == 0:
        try:
            run_program()
        except BaseException as e:
            os.write(2, ("sandbox: could not start program: %r\n" % (e,)).encode())
        os._exit(127)
    while True:  # as pid 1 we also reap orphans; stop when the program itself ends
        pid, st = os.waitpid(-1, 0)
        if pid == child:
            break
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    report(returncode=os.waitstatus_to_exitcode(st), cpu=ru.ru_utime + ru.ru_stime)
class Expired(Exception):
    pass
def on_alarm(signum, frame):
    raise Expired()
start = time.monotonic()
pid = os.fork()
if pid == 0:
    try:
        shim()
    finally:
        os._exit(0)
signal.signal(signal.SIGALRM, on_alarm)
signal.setitimer(signal.ITIMER_REAL, cfg["timeout"])
timed_out = done = False
try:
    os.waitpid(pid, 0)
    done = True
    signal.setitimer(signal.ITIMER_REAL, 0)
except Expired:
    if not done:
        timed_out = True
        try:
            os.kill(pid, signal.SIGKILL)  # the shim is pid 1 of the namespace: everything in it dies too
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):  # it ended just as the alarm rang
            timed_out = False
signal.signal(signal.SIGALRM, signal.SIG_IGN)
wall = time.monotonic() - start
disk_full = False
if newroot is not None:  # did the program use up the writable space (blocks or inodes)?
    vfs = os.statvfs("/tmp")
    disk_full = vfs.f_bavail * vfs.f_frsize < 8192 or vfs.f_favail == 0
if suid is not None and not pidns:  # kill every process left under the sandbox uid (escaped the group, no pid namespace)
    for _ in range(50):
        k = os.fork()
        if k == 0:
            try:
                os.setgid(suid); os.setuid(suid)
                os.kill(-1, signal.SIGKILL)
                os._exit(1)
            except ProcessLookupError:
                os._exit(0)
            except BaseException:
                os._exit(2)
        _, st = os.waitpid(k, 0)
        if os.waitstatus_to_exitcode(st) != 1:
            break
report(timed_out=timed_out, wall=wall, disk_full=disk_full)
'''

_warned: set[str] = set()
_CONFINE_FS = True  # the filesystem layer; switched off only by tests and the benchmark (before/after)
_UID_BASE = 1_800_000_000  # far above any real account; one random uid per run


def _hidden_top(path: str) -> str | None:
    """The first directory on the way to `path` that other users cannot traverse, or None."""
    cur = "/"
    for part in [p for p in path.split("/") if p]:
        cur = os.path.join(cur, part)
        try:
            if not os.stat(cur).st_mode & 0o001:
                return cur
        except OSError:
            return None
    return None


@functools.lru_cache(maxsize=1)
def _reveal_plan() -> tuple[list[str], list[str]]:
    """(paths, tops): interpreter/library directories the sandbox uid could not reach, and the hidden
    directories above them (e.g. a pyenv Python under /root, mode 0700). The launcher makes exactly those
    paths visible in a private mount namespace and hides the rest of each top directory under a tmpfs."""
    candidates = {sys.base_prefix, sys.prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    candidates |= {p for p in sys.path if p and os.path.isdir(p)}
    hidden: dict[str, str] = {}
    for cand in candidates:
        real = os.path.realpath(cand)
        top = _hidden_top(real)
        if top is not None and top != real and os.path.isdir(real):
            hidden[real] = top
    paths = sorted(p for p in hidden if not any(p != q and p.startswith(q + "/") for q in hidden))
    tops = sorted({hidden[p] for p in paths})
    tops = [t for t in tops if not any(t != u and t.startswith(u + "/") for u in tops)]
    return paths, tops


# Directories every program may need, shown read-only in the confined filesystem (when they exist).
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
_PRIVATE_PLACES = ("/tmp", "/var/tmp", "/dev/shm")  # fresh per run, inside the writable tmpfs
_PIVOT_ROOT_NR = {"x86_64": 155, "aarch64": 41, "arm64": 41}  # glibc has no pivot_root() wrapper


def _interpreter_dirs() -> list[str]:
    """What the interpreter and its installed libraries need: its prefixes and site-packages. Deliberately
    not the rest of `sys.path` (the caller's working directory, editable checkouts of projects)."""
    dirs = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
            os.path.dirname(os.path.realpath(sys.executable)), os.path.dirname(sys.executable)]
    try:
        import site

        dirs += site.getsitepackages()
    except AttributeError:  # an old virtualenv's site.py
        pass
    return [d for d in dirs if d and os.path.isdir(d)]


def _expose(path: str, links: dict[str, str], binds: set[str]) -> None:
    """Add what makes `path` reachable at the same name: every symlink met on the way (recreated as is)
    and the real directory at the end (bound read-only)."""
    cur = ""
    parts = [p for p in os.path.normpath(path).split("/") if p]
    for i, part in enumerate(parts):
        cur += "/" + part
        if os.path.islink(cur):
            target = os.readlink(cur)
            if cur in links or len(links) > 64:  # already followed (or a link loop)
                return
            links[cur] = target
            rest = "/".join(parts[i + 1:])
            _expose(os.path.join(os.path.dirname(cur), target, rest), links, binds)
            return
    binds.add(cur or "/")


@functools.lru_cache(maxsize=1)
def _fs_plan() -> list[tuple[str, str, str]] | None:
    """[(kind, path, target)]: the symlinks to recreate and the directories to bind read-only in the new
    root, computed once per process. None when this machine cannot pivot into a new root."""
    if os.uname().machine not in _PIVOT_ROOT_NR:
        return None
    links: dict[str, str] = {}
    binds: set[str] = set()
    for d in list(_SYSTEM_DIRS) + _interpreter_dirs():
        if os.path.lexists(d):
            _expose(d, links, binds)
    if "/" in binds:  # an interpreter installed at / itself: cannot hide anything
        return None
    binds = {b for b in binds if not any(b.startswith(q + "/") for q in binds)}
    covered = lambda p: any(p.startswith(b + "/") for b in binds)  # noqa: E731  (inside a bound dir already)
    plan = [("link", p, t) for p, t in links.items() if not covered(p)]
    plan += [("bind", b, "") for b in binds]
    if any(p in _PRIVATE_PLACES for _, p, _ in plan):  # would replace a private place (an interpreter in /tmp
        return None                                       # itself is fine: bound inside the fresh /tmp)
    return sorted(plan, key=lambda a: (a[1].count("/"), a[1]))


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        log.warning(message)


def _scrubbed_env(workdir: str) -> dict[str, str]:
    """The whole environment a program sees: nothing of the caller's (secrets, tokens) is passed on."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": workdir,
        "TMPDIR": workdir,
        "PYTHONIOENCODING": "utf-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


def _read_capped(path: str, cap: int) -> tuple[str, str, bool]:
    """(head, tail, truncated): the first `cap` bytes, and the last 4 KB used to classify the failure."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(cap)
        tail = head[-4096:]
        if size > cap:
            f.seek(max(0, size - 4096))
            tail = f.read()
    dec = lambda b: b.decode("utf-8", errors="replace")  # noqa: E731
    return dec(head), dec(tail), size > cap


_MEMORY_RE = re.compile(r"^(MemoryError\b|.*Cannot allocate memory|.*std::bad_alloc)", re.M)
_FSIZE_RE = re.compile(r"(\[Errno 27\]|File too large)")
_NOSPACE_RE = re.compile(r"(\[Errno 28\]|No space left on device|\[Errno 122\]|Disk quota exceeded)")


def classify(returncode: int | None, stderr_tail: str, timed_out: bool, cpu_time: float | None,
             cpu_limit: float, disk_full: bool = False) -> tuple[str, str]:
    """(status, message) from how the program ended. Pure, so the mapping is unit-tested on its own.
    `disk_full`: the writable space (working directory + /tmp + /var/tmp + /dev/shm) was used up."""
    if timed_out:
        return "timeout", "wall-clock timeout" + (" (writable space used up)" if disk_full else "")
    if (isinstance(returncode, int) and returncode > 0 and not _MEMORY_RE.search(stderr_tail)
            and (disk_full or _NOSPACE_RE.search(stderr_tail))):
        return "file_size", "disk-space limit exceeded (the writable space is used up)"
    if returncode is None:
        return "sandbox_error", "the sandbox launcher did not report a result"
    if returncode == 0:
        return "ok", ""
    if returncode < 0:
        sig = -returncode
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu_time is not None and cpu_time >= cpu_limit - 0.05):
            return "timeout", f"CPU-time limit ({cpu_limit:g} s) exceeded"
        if sig == signal.SIGXFSZ:
            return "file_size", "file-size limit exceeded"
        if _MEMORY_RE.search(stderr_tail):
            return "memory", f"memory limit exceeded (killed by {name})"
        return "killed", f"killed by signal {name}"
    if _MEMORY_RE.search(stderr_tail):
        return "memory", "memory limit exceeded"
    if _FSIZE_RE.search(stderr_tail):
        return "file_size", "file-size limit exceeded"
    if returncode == 127 and "sandbox: could not start program" in stderr_tail:
        return "sandbox_error", stderr_tail.strip().splitlines()[-1]
    return "error", f"exit code {returncode}"


def _read_status(fd: int) -> dict[str, Any]:
    """Merge the launcher's JSON lines (read without blocking: a killed launcher may have written nothing)."""
    os.set_blocking(fd, False)
    chunks = []
    try:
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    except BlockingIOError:
        pass
    info: dict[str, Any] = {}
    for line in b"".join(chunks).decode(errors="replace").splitlines():
        try:
            info.update(json.loads(line))
        except json.JSONDecodeError:
            continue
    return info


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _note_isolation(layers: list[str], limits: SandboxLimits) -> None:
    if not layers:
        return
    if not limits.network and "netns" not in layers:
        _warn_once("netns", "judgekit sandbox: no network namespace available here; "
                            "sandboxed programs can use the network")
    if "fs" not in layers and _CONFINE_FS:
        _warn_once("fs", "judgekit sandbox: cannot confine the filesystem here ("
                         + ("no user + mount namespaces" if os.geteuid() != 0 else "no mount namespace / pivot_root")
                         + "); "
                         "programs can read world-readable files and leave files in world-writable places")
    if "uid" not in layers:
        _warn_once("uid", "judgekit sandbox: not running as root, so programs run as the caller's user "
                          "(no uid switch)" + ("" if "pidns" in layers else " and can see/signal its processes"))


_RUN_PREFIX = "judgekit-sbx-run-"
_run_lock = threading.Lock()
_run_dir: tuple[int, str] | None = None  # (owner pid, path): a forked child makes its own
_reapers: list[tuple[subprocess.Popen, int]] = []  # kept for the process's lifetime (and their pipe ends)

# rmtree that also copes with directories the program made unreadable (chmod 000). Kept as source text
# because the dependency-free reaper runs it in a bare interpreter; this process execs the same text.
_REMOVE_TREE = r"""
import os, shutil
def remove_tree(path):
    def fix(func, p, _exc):
        # Never touch what lies outside the tree (the root's parent is the shared temp directory), nor a path
        # that is gone (the caller's exit handler may have removed the tree first).
        if not os.path.lexists(p):
            return
        try:
            if os.path.abspath(p) != os.path.abspath(path):
                os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700)
            func(p)
        except OSError:
            pass
    for _ in range(5):
        shutil.rmtree(path, onerror=fix)
        if not os.path.exists(path):
            break
"""
# The reaper: waits until its pipe from the caller closes (the caller exited or was killed: the kernel closes
# the pipe either way), then removes the caller's run directory. Dependency-free, like the launcher.
_REAPER = _REMOVE_TREE + r"""
import sys
try:
    while os.read(0, 4096):
        pass
except OSError:
    pass
remove_tree(sys.argv[1])
"""


def _process_run_dir() -> str:
    """This process's run directory, holding every sandbox's private and working directories.

    Created on first use, after sweeping run directories whose owner pid is dead; removed at exit, and by
    the reaper when this process dies without running its exit handlers (SIGTERM, SIGKILL)."""
    global _run_dir
    with _run_lock:
        if _run_dir is None or _run_dir[0] != os.getpid() or not os.path.isdir(_run_dir[1]):
            base = tempfile.gettempdir()
            sweep_stale(Path(base), _RUN_PREFIX)
            path = tempfile.mkdtemp(prefix=f"{_RUN_PREFIX}{os.getpid()}-", dir=base)
            os.chmod(path, 0o711)  # the sandbox uid may traverse to its own working directory, not list others
            _run_dir = (os.getpid(), path)
            atexit.register(_remove_run_dir, path)
            _start_reaper(path)
        return _run_dir[1]


def _start_reaper(path: str) -> None:
    read_end, write_end = os.pipe()  # we hold the write end until we die; exec'd children do not inherit it
    try:
        reaper = subprocess.Popen([sys.executable, "-I", "-S", "-c", _REAPER, path], stdin=read_end,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                                  close_fds=True, env={"PATH": "/usr/bin:/bin"})
    except OSError:  # no reaper: the next run's sweep removes what a killed caller leaves
        os.close(write_end)
        return
    finally:
        os.close(read_end)
    _reapers.append((reaper, write_end))


def _remove_run_dir(path: str) -> None:
    if os.path.isdir(path):
        _remove_tree(path)


def run_program(code: str, stdin: str | None = None, limits: SandboxLimits | None = None) -> SandboxResult:
    """Run `code` as a Python program with the current interpreter, isolated (see the module docstring)."""
    limits = limits or SandboxLimits()
    root = os.geteuid() == 0
    sandbox_uid = _UID_BASE + random.randrange(1 << 24) if root else None
    fs_plan = _fs_plan() if _CONFINE_FS else None
    reveal, tops = _reveal_plan() if root else ([], [])
    run_dir = _process_run_dir()
    private = tempfile.mkdtemp(prefix="judgekit-sbx-io-", dir=run_dir)  # caller-only: stdin/stdout/stderr files
    workdir = tempfile.mkdtemp(prefix="judgekit-sbx-", dir=run_dir)
    status_r = status_w = -1
    proc = None
    start = time.monotonic()
    try:
        script = os.path.join(workdir, "main.py")
        with open(script, "w", encoding="utf-8") as f:
            f.write(code)
        os.chmod(script, 0o644)
        if sandbox_uid is not None:
            os.chown(workdir, sandbox_uid, sandbox_uid)
        os.chmod(workdir, 0o700)
        in_path = os.path.join(private, "stdin")
        with open(in_path, "w", encoding="utf-8") as f:
            f.write(stdin or "")
        out_path, err_path = os.path.join(private, "stdout"), os.path.join(private, "stderr")
        status_r, status_w = os.pipe()
        cpu = limits.effective_cpu_s()
        cfg = {
            "reveal": reveal, "reveal_tops": tops, "stage_dir": private,
            "fs": fs_plan and {"plan": fs_plan, "disk_kb": limits.disk_mb << 10,
                               "inodes": max(1024, limits.disk_mb * 64)},
            "pivot_root_nr": _PIVOT_ROOT_NR.get(os.uname().machine, -1),
            "status_fd": status_w, "caller_pid": os.getpid(), "network": limits.network, "uid": sandbox_uid,
            "workdir": workdir, "script": script, "python": sys.executable, "env": _scrubbed_env(workdir),
            "timeout": float(limits.timeout_s),
            "limits": {"cpu": cpu, "as": limits.memory_mb << 20, "fsize": limits.file_size_mb << 20,
                       "nproc": limits.max_processes},
        }
        with open(in_path, "rb") as fin, open(out_path, "wb") as fout, open(err_path, "wb") as ferr:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _LAUNCHER, json.dumps(cfg)],
                stdin=fin, stdout=fout, stderr=ferr, pass_fds=(status_w,), env={"PATH": "/usr/bin:/bin"},
                cwd=workdir, start_new_session=True, close_fds=True,
            )
        os.close(status_w)
        status_w = -1
        try:
            proc.wait(timeout=limits.timeout_s + 15)  # backstop: the launcher enforces the real timeout
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            proc.wait()
        _kill_group(proc.pid)
        caller_wall = time.monotonic() - start
        info = _read_status(status_r)
        stdout, _, trunc_out = _read_capped(out_path, limits.max_output_bytes)
        stderr, err_tail, trunc_err = _read_capped(err_path, limits.max_output_bytes)
        layers = info.get("layers", [])
        for note in info.get("notes", []):
            _warn_once(note, f"judgekit sandbox: {note}")
        _note_isolation(layers, limits)
        rc = info.get("returncode")
        timed_out = bool(info.get("timed_out")) or "wall" not in info and caller_wall > limits.timeout_s
        status, message = classify(rc, err_tail, timed_out, info.get("cpu"), cpu, bool(info.get("disk_full")))
        if status == "sandbox_error" and proc.returncode:
            message += f" (launcher exit code {proc.returncode})"
        return SandboxResult(
            status=status, returncode=rc, stdout=stdout, stderr=stderr,
            wall_time=round(float(info.get("wall", caller_wall)), 4),
            cpu_time=None if info.get("cpu") is None else round(float(info["cpu"]), 4),
            signal=-rc if isinstance(rc, int) and rc < 0 else None,
            truncated=trunc_out or trunc_err, isolation=layers, message=message,
        )
    finally:
        if proc is not None and proc.poll() is None:
            _kill_group(proc.pid)
            proc.wait()
        for fd in (status_r, status_w):
            if fd >= 0:
                os.close(fd)
        shutil.rmtree(private, ignore_errors=True)
        _remove_tree(workdir)


_tree_namespace: dict = {}
exec(_REMOVE_TREE, _tree_namespace)  # noqa: S102 - judgekit's own constant source, shared with the reaper
_remove_tree = _tree_namespace["remove_tree"]


def default_workers() -> int:
    return max(1, min(8, os.cpu_count() or 1))


def run_many(jobs: list[tuple[str, str | None]], limits: SandboxLimits | None = None,
             workers: int | None = None) -> list[SandboxResult]:
    """Run (code, stdin) jobs in parallel, each in its own sandbox; results keep the order of `jobs`.

    Threads suffice: each worker only waits on its sandbox's launcher process.
    """
    if not jobs:
        return []
    workers = workers or default_workers()
    if workers == 1 or len(jobs) == 1:
        return [run_program(code, stdin, limits) for code, stdin in jobs]
    with ThreadPoolExecutor(max_workers=min(workers, len(jobs))) as pool:
        return list(pool.map(lambda job: run_program(job[0], job[1], limits), jobs))


__all__ = ["SandboxLimits", "SandboxResult", "STATUSES", "classify", "run_many", "run_program"]
