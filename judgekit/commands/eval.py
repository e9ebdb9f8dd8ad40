"""`judgekit eval`: a sweep of rules and parameters over a task's problems -> records, summary and plots.

Settings come from the command line, a TOML/YAML config file (``--config``), or both (a flag given on the
command line overrides the config's value everywhere). A config may hold several ``[[sweep]]`` tables, each a
set of rules with their parameter lists, sharing the task and the models. Every key is declared once in
judgekit.config (the rule parameters in judgekit.decode.params): the flags below and the file's checks come
from those declarations.
"""

from __future__ import annotations

import json

from judgekit import config as C
from pathlib import Path

from judgekit.commands._args import (add_loading_args, add_model_args, add_rule_args, add_sampling_args,
                                    add_setting)
from judgekit.errors import JudgekitError


def given_settings(args) -> dict:
    """The settings set on the command line (argparse leaves the others None)."""
    keys = [s.key for s in (*C.EVAL_RUN, *C.eval_sweep_settings())]
    return {k: getattr(args, k) for k in keys if getattr(args, k, None) is not None}


def run(args) -> int:
    given = given_settings(args)
    tasks = [t.strip() for t in str(given.get("task", "")).split(",") if t.strip()]
    if len(tasks) > 1:  # --task a,b: one run directory per task under --out
        if "out" not in given:
            raise JudgekitError("--task with several tasks needs --out on the command line (one directory per task)")
        return max(run_one(args, {**given, "task": t, "out": str(Path(given["out"]) / t)}) for t in tasks)
    return run_one(args, given)


def run_one(args, given: dict) -> int:
    from judgekit.evaluate import job as eval_job
    from judgekit.evaluate.report import summary_title
    from judgekit.evaluate.summary import json_rows, summary_markdown

    job = eval_job.prepare(args.config, given,
                           sweep_filter=eval_job.skip_missing_judges if args.dry_run else None)
    if args.dry_run:
        print(f"{job.settings['task']}: {len(job.problems)} problems x {len(job.points)} points = "
              f"{len(job.problems) * len(job.points)} decodings -> {job.out}")
        for p in job.points:
            print(f"  {p.label}  T={p.temperature:g} gamma={p.block_size} seed={p.seed}"
                  + (f" tree={p.tree}" if p.tree else ""))
        return 0
    rows = eval_job.run(job, quiet=args.quiet, progress_bars=True if args.progress else None)
    if rows is not None:
        title = summary_title(job.settings["title"], job.run_settings.to_dict())
        print(json.dumps(json_rows(rows)) if args.json else summary_markdown(rows, title))
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "eval", help="evaluate rules on a task: per-problem records, summary with 95%% intervals, plots",
        description="Speculative decoding of a task's problems for every point of a sweep (rules x parameter "
                    "lists x temperatures x block sizes or draft trees x seeds); grades each completion, records it in "
                    "Parquet (resumable; sharded across ranks under torchrun), then writes summary.md, "
                    "summary.csv, be_quality.png and truncation.png in --out. Comma lists sweep: "
                    "--lenience 0.2,0.4 --judge-threshold p20,p40,0.3 --temperature 0,1.0.")
    p.add_argument("--config", help="TOML or YAML file with the same settings (flags override it)")
    run_settings = {s.key: s for s in C.EVAL_RUN}
    for key in ("task", *(s.key for s in C.TASK_OPTIONS)):
        add_setting(p, run_settings[key], sweep=True)
    add_model_args(p, required=False)
    add_loading_args(p)
    for key in ("split", "data_file", "limit"):
        add_setting(p, run_settings[key], sweep=True)
    add_rule_args(p, mode="sweep")
    add_sampling_args(p, sweep=True)
    add_setting(p, C.TREES, sweep=True, nargs=True)
    for key in ("out", "title", "flush_every", "threads", "batch_size", "grade_workers"):
        add_setting(p, run_settings[key], sweep=True)
    p.add_argument("--dry-run", action="store_true",
                   help="run every check of the real run (settings, rules, judges, problems, --out) and list "
                        "the points; load no model and write nothing")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--progress", action="store_true",
                   help="progress bars even when stderr is not a terminal (they are on in a terminal by default)")
    p.add_argument("--json", action="store_true", help="print the summary rows as JSON")
    p.set_defaults(func=run, device=None, dtype=None)  # None: not given, so a config file's value holds
