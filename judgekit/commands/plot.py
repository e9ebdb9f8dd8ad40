"""`judgekit plot`: the trade-off plot (and the paired and truncation comparisons) of one or more eval
directories, each as PNG with a vector PDF beside it."""

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
    from judgekit.evaluate.plots import plot_paired, plot_tradeoff, plot_truncation
    from judgekit.evaluate.report import load_rows

    out_path = image_path(args.out, "--out")
    paired_path = image_path(args.paired, "--paired") if args.paired else \
        out_path.with_name(out_path.stem + "-paired" + out_path.suffix)
    trunc_path = image_path(args.truncation, "--truncation") if args.truncation else \
        out_path.with_name(out_path.stem + "-truncation" + out_path.suffix)
    rows, settings = load_rows(args.dirs)
    title = args.title or ""
    out = plot_tradeoff(rows, out_path, title, settings)
    print(f"wrote {out} (and .pdf)")
    for plot, path in ((plot_paired, paired_path), (plot_truncation, trunc_path)):
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
    p.add_argument("--out", required=True, help="image file of the trade-off plot (.png, .svg, ...; a PDF is "
                                                "written beside it)")
    p.add_argument("--paired", help="image file of the paired comparison (default: OUT-paired with OUT's suffix)")
    p.add_argument("--truncation", help="image file of the truncation comparison (default: OUT-truncation with "
                                        "OUT's suffix)")
    p.add_argument("--title")
    p.set_defaults(func=run)
