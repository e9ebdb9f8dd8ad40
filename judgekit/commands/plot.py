"""`judgekit plot`: the trade-off plot (and the paired and truncation comparisons) of one or more eval
directories, each as PNG with a vector PDF beside it."""

from __future__ import annotations

from pathlib import Path


def run(args) -> int:
    from judgekit.evaluate.plots import plot_paired, plot_tradeoff, plot_truncation
    from judgekit.evaluate.report import load_rows

    rows, settings = load_rows(args.dirs)
    title = args.title or ""
    out = plot_tradeoff(rows, args.out, title, settings)
    print(f"wrote {out} (and .pdf)")
    stem = Path(args.out)
    for plot, path in ((plot_paired, args.paired or stem.with_name(stem.stem + "-paired.png")),
                       (plot_truncation, args.truncation or stem.with_name(stem.stem + "-truncation.png"))):
        written = plot(rows, path, title, settings)
        if written:
            print(f"wrote {written} (and .pdf)")
    return 0


def register(sub) -> None:
    p = sub.add_parser("plot", help="plot block efficiency against quality for eval directories",
                       description="Block efficiency against quality, one curve per rule ordered by BE, each "
                                   "point labelled with its parameter, lossless marked, 95%% interval error "
                                   "bars on both axes (one panel per temperature and block size), for one or "
                                   "more `judgekit eval` directories; plus each point's paired difference "
                                   "against its baseline, and each truncation rule beside its matched baseline "
                                   "when both were evaluated. Every plot is a PNG with a vector PDF beside it.")
    p.add_argument("dirs", nargs="+", help="evaluation directories written by `judgekit eval`")
    p.add_argument("--out", required=True, help="PNG file of the trade-off plot")
    p.add_argument("--paired", help="PNG file of the paired comparison (default: OUT-paired.png)")
    p.add_argument("--truncation", help="PNG file of the truncation comparison (default: OUT-truncation.png)")
    p.add_argument("--title")
    p.set_defaults(func=run)
