"""The files of an evaluation directory — summary.md, summary.csv, the plots — rebuilt from *all* its records.

A rerun with fewer rules (or fewer problems) than an earlier run extends the summary, never shrinks it: the
rows come from every record in the directory, not from the points of the run that wrote them last.
"""

from __future__ import annotations

from pathlib import Path

from judgekit.evaluate.plots import pair_title, plot_paired, plot_tradeoff, plot_truncation
from judgekit.evaluate.summary import summarize, summary_csv, summary_markdown
from judgekit.store.atomic import atomic_write_bytes
from judgekit.store.records import read_manifest, read_records

OUTPUTS = ("summary.md", "summary.csv", "be_quality.png", "paired.png", "truncation.png")


def summary_title(title: str, settings: dict) -> str:
    """The summary's heading: the user's title (if any) and the task and model pair."""
    return " — ".join(x for x in (title, pair_title(settings)) if x)


def rebuild_outputs(out_dir: str | Path, title: str = "") -> tuple[list[dict], list[Path]]:
    """Summarise every record of `out_dir` and (re)write its summary and plots atomically (each plot as PNG
    and PDF). Returns the summary rows and the files written."""
    out_dir = Path(out_dir)
    settings = read_manifest(out_dir)
    rows = summarize(read_records(out_dir))
    written = []
    from judgekit.provenance import summary_footer

    for name, text in (("summary.md", summary_markdown(rows, summary_title(title, settings)) + summary_footer(out_dir)),
                       ("summary.csv", summary_csv(rows))):
        atomic_write_bytes(out_dir / name, text.encode(), 0)
        written.append(out_dir / name)
    written.append(plot_tradeoff(rows, out_dir / "be_quality.png", title, settings))
    for plot, name in ((plot_paired, "paired.png"), (plot_truncation, "truncation.png")):
        path = plot(rows, out_dir / name, title, settings)
        if path:
            written.append(path)
    return rows, written


def load_rows(dirs: list[str | Path]) -> tuple[list[dict], list[dict]]:
    """Summary rows of several evaluation directories (each row's `source` is its directory's name when
    there is more than one; baselines are found within a directory) and the directories' settings."""
    rows, settings = [], []
    for d in dirs:
        settings.append(read_manifest(d))
        part = summarize(read_records(d))
        if len(dirs) > 1:
            for r in part:
                r["source"] = Path(d).name
        rows.extend(part)
    return rows, settings
