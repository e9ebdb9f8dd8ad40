"""`judgekit sandbox run FILE`: run one program exactly the way generated code is graded, and show the result."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from judgekit.errors import JudgekitError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("sandbox", help="run a program in the isolation used to grade generated code")
    sub = parser.add_subparsers(dest="sandbox_command", metavar="ACTION")
    run = sub.add_parser("run", help="run a Python file in the sandbox and print the result")
    run.add_argument("file", help="Python program to run")
    run.add_argument("--stdin", help="file whose contents are fed to the program's standard input")
    run.add_argument("--timeout", type=float, default=10.0, help="wall-clock limit in seconds (default 10)")
    run.add_argument("--cpu", type=float, default=None, help="CPU-time limit in seconds (default: the timeout)")
    run.add_argument("--memory-mb", type=int, default=1024, help="address-space limit in MiB (default 1024)")
    run.add_argument("--file-size-mb", type=int, default=64, help="largest file the program may write (MiB)")
    run.add_argument("--disk-mb", type=int, default=128,
                     help="writable space shared by the working directory, /tmp, /var/tmp, /dev/shm (MiB, "
                          "RAM-backed; default 128; only where the filesystem is confined)")
    run.add_argument("--max-processes", type=int, default=32, help="process/thread limit (default 32)")
    run.add_argument("--network", action="store_true", help="keep the host network (isolated by default)")
    run.add_argument("--json", action="store_true", help="print the whole result as one JSON object")
    run.set_defaults(func=_run)
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])


def _read(path: str, what: str) -> str:
    p = Path(path)
    if not p.is_file():
        raise JudgekitError(f"{what} {path!r} does not exist or is not a file")
    return p.read_text(encoding="utf-8", errors="replace")


def _run(args: argparse.Namespace) -> int:
    from judgekit.sandbox import SandboxLimits, run_program

    if args.timeout <= 0 or args.memory_mb <= 0 or args.disk_mb <= 0:
        raise JudgekitError("--timeout, --memory-mb and --disk-mb must be positive")
    code = _read(args.file, "program")
    stdin = _read(args.stdin, "stdin file") if args.stdin else None
    limits = SandboxLimits(timeout_s=args.timeout, cpu_s=args.cpu, memory_mb=args.memory_mb,
                           file_size_mb=args.file_size_mb, max_processes=args.max_processes, network=args.network,
                           disk_mb=args.disk_mb)
    result = run_program(code, stdin=stdin, limits=limits)
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        print(f"status: {result.status}" + (f" ({result.message})" if result.message else ""))
        print(f"return code: {result.returncode}   wall time: {result.wall_time:.3f} s   "
              f"isolation: {', '.join(result.isolation) or 'none'}")
        if result.stdout:
            print("--- stdout ---\n" + result.stdout.rstrip("\n"))
        if result.stderr:
            print("--- stderr ---\n" + result.stderr.rstrip("\n"))
    return 0 if result.ok else 1
