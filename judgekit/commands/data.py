"""`judgekit data stats DIR`: validate a mining directory and summarise what was mined (DESIGN.md §3)."""

from __future__ import annotations

import argparse
import json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("data", help="inspect mined mismatch directories")
    sub = parser.add_subparsers(dest="data_command", metavar="ACTION")
    stats = sub.add_parser("stats", help="validate a mining directory and print its summary")
    stats.add_argument("dir", help="mining output directory (the miner's --out)")
    stats.add_argument("--json", action="store_true", help="print the statistics as one JSON object")
    stats.set_defaults(func=_stats)

    def _help(_args: argparse.Namespace) -> int:
        parser.print_help()
        return 2

    parser.set_defaults(func=_help)


def _stats(args: argparse.Namespace) -> int:
    # Imported here so that `judgekit --help` does not pay for pyarrow.
    from judgekit.store import dir_stats, format_stats, validate_dir

    validate_dir(args.dir)
    stats = dir_stats(args.dir)
    print(json.dumps(stats, indent=2) if args.json else format_stats(stats))
    return 0
