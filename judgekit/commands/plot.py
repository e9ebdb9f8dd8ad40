"""`judgekit plot`: the trade-off plot (and the truncation comparison) of one or more eval directories."""

from __future__ import annotations

from pathlib import Path


def run(args) -> int:
    from judgekit.evaluate.summary import summarize
    from judgekit.evaluate.plots import plot_tradeoff, plot_truncation
    from judgekit.store.records import read_records

    rows = []
    for d in args.dirs:
        part = summarize(read_records(d))
        if len(args.dirs) > 1:  # several directories: name each curve after its directory
            for r in part:
                r["source"] = Path(d).name
        rows.extend(part)
    out = plot_tradeoff(rows, args.out, args.title or "")
    print(f"wrote {out}")
    trunc_path = args.truncation or Path(args.out).with_name(Path(args.out).stem + "-truncation.png")
    trunc = plot_truncation(rows, trunc_path, args.title or "")
    if trunc:
        print(f"wrote {trunc}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("plot", help="plot block efficiency against quality for eval directories",
                       description="Block efficiency against quality, one curve per rule, lossless marked, "
                                   "95%% interval error bars (one panel per temperature and block size), for "
                                   "one or more `judgekit eval` directories; plus each truncation rule beside "
                                   "its matched baseline when both were evaluated.")
    p.add_argument("dirs", nargs="+", help="evaluation directories written by `judgekit eval`")
    p.add_argument("--out", required=True, help="PNG file of the trade-off plot")
    p.add_argument("--truncation", help="PNG file of the truncation comparison (default: OUT-truncation.png)")
    p.add_argument("--title")
    p.set_defaults(func=run)
