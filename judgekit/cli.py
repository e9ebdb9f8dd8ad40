"""The `judgekit` command line: one sub-command module per stage under `judgekit.commands`.

Each command module exposes `register(subparsers)`, which adds its parser and sets `func` to a callable
taking the parsed args and returning an exit code. Keeping commands in separate modules means a stage can
be added without touching the others, and `judgekit --help` lists exactly the commands that exist.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import re
import sys

from judgekit._version import __version__
from judgekit.errors import JudgekitError


class _Parser(argparse.ArgumentParser):
    """argparse's parser with its errors as one `judgekit: error:` line, like every other refusal (sub-commands'
    parsers are of the same class)."""

    def error(self, message: str):
        self.exit(2, f"judgekit: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="judgekit",
        description="Judge-based lossy speculative decoding and the paper's lossy verification rules.",
    )
    parser.add_argument("--version", action="version", version=f"judgekit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    import judgekit.commands as commands

    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"judgekit.commands.{info.name}")
        module.register(sub)
    return parser


_NEGATIVE_LIST = re.compile(r"^-\d+(,-?\d+)*$")


def _glue_negative_lists(argv: list[str]) -> list[str]:
    """argparse reads `--layers -1,12` as two options; glue such values to their flag (`--layers=-1,12`)."""
    out: list[str] = []
    for arg in argv:
        if out and out[-1].startswith("--") and "=" not in out[-1] and _NEGATIVE_LIST.match(arg):
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(_glue_negative_lists(list(sys.argv[1:] if argv is None else argv)))
    except SystemExit as exit_:  # argparse printed the usage and its error (or the help): its exit code
        return int(exit_.code or 0)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except JudgekitError as err:
        print(f"judgekit: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("judgekit: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`judgekit ... | head`): stop quietly like other Unix tools (exit 128 + SIGPIPE),
        # and point stdout at /dev/null so the interpreter's final flush does not print a second error.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
