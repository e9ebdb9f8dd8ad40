"""`judgekit data stats|compact DIR`: validate, summarise and compact a mining directory (docs/design.md §3, §7)."""

from __future__ import annotations

import argparse
import json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("data", help="inspect and compact mined mismatch directories")
    sub = parser.add_subparsers(dest="data_command", metavar="ACTION")
    stats = sub.add_parser("stats", help="validate a mining directory and print its summary")
    stats.add_argument("dir", help="mining output directory (the miner's --out)")
    stats.add_argument("--json", action="store_true", help="print the statistics as one JSON object")
    stats.set_defaults(func=_stats)
    compact = sub.add_parser("compact", help="rewrite a mining directory's commits into few large files",
                             description="Validate DIR, then rewrite every committed shard into few Parquet "
                                         "files with large row groups, atomically (safe to kill). Refused "
                                         "while a `judgekit mine` is writing DIR. A completed `judgekit mine` "
                                         "compacts by itself; use this for an interrupted or merged directory.")
    compact.add_argument("dir", help="mining output directory (the miner's --out)")
    compact.set_defaults(func=_compact)

    def _help(_args: argparse.Namespace) -> int:
        parser.print_help()
        return 2

    parser.set_defaults(func=_help)


def _stats(args: argparse.Namespace) -> int:
    # Imported here so that `judgekit --help` does not pay for pyarrow.
    from judgekit.store.mined import validate_dir
    from judgekit.store.shards import MINED, require_kind
    from judgekit.store.stats import dir_stats, format_stats

    require_kind(args.dir, MINED)
    validate_dir(args.dir)
    stats = dir_stats(args.dir)
    print(json.dumps(stats, indent=2) if args.json else format_stats(stats))
    return 0


def _compact(args: argparse.Namespace) -> int:
    from judgekit.store.compact import compact_dir
    from judgekit.store.shards import MINED, require_kind

    require_kind(args.dir, MINED)
    res = compact_dir(args.dir)
    if res.commits == 0:
        print(f"{args.dir}: nothing to compact ({res.files_before} data file(s))")
    else:
        print(f"{args.dir}: compacted {res.commits} commits ({res.problems} problems, {res.mismatches} mismatches) "
              f"from {res.files_before} into {res.files_after} data files in {res.seconds:.1f}s")
    return 0
