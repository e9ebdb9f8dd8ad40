"""`judgekit plot`: the trade-off plot (and the truncation comparison) of one or more eval directories."""

from __future__ import annotations

from pathlib import Path

from judgekit.errors import JudgekitError


def image_path(out: str, flag: str) -> Path:
    """An image file matplotlib can write, named by its suffix (matplotlib would add .png to a bare name)."""
    from matplotlib.figure import Figure

    path = Path(out)
    formats = Figure().canvas.get_supported_filetypes()
    if path.is_dir():
        raise JudgekitError(f"{flag} {out} is a directory; give an image file such as {path / 'be_quality.png'}")
    if path.suffix.lstrip(".").lower() not in formats:
        raise JudgekitError(f"{flag} {out}: give an image file ending in one of "
                            f"{', '.join('.' + f for f in sorted(formats))}")
    return path


def run(args) -> int:
    from judgekit.evaluate.summary import summarize
    from judgekit.evaluate.plots import plot_tradeoff, plot_truncation
    from judgekit.store.records import read_records

    out_path = image_path(args.out, "--out")
    trunc_path = image_path(args.truncation, "--truncation") if args.truncation else \
        out_path.with_name(out_path.stem + "-truncation" + out_path.suffix)
    rows = []
    for d in args.dirs:
        part = summarize(read_records(d))
        if len(args.dirs) > 1:  # several directories: name each curve after its directory
            for r in part:
                r["source"] = Path(d).name
        rows.extend(part)
    out = plot_tradeoff(rows, out_path, args.title or "")
    print(f"wrote {out}")
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
    p.add_argument("--out", required=True, help="image file of the trade-off plot (.png, .pdf, .svg, ...)")
    p.add_argument("--truncation", help="image file of the truncation comparison (default: OUT-truncation with OUT's suffix)")
    p.add_argument("--title")
    p.set_defaults(func=run)
