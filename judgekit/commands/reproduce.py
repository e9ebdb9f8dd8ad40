"""`judgekit reproduce`: mine, train the 9:1 and 1:9 judges, evaluate the paper's experiments on the pocket world
and write a findings table whose verdicts come from the paired intervals (judgekit/evaluate/reproduce.py)."""

from __future__ import annotations

import time
from pathlib import Path

from judgekit.errors import JudgekitError


def run(args) -> int:
    from dataclasses import replace

    import torch

    from judgekit.evaluate.reproduce import CONFIG, load_settings, quick, reproduce

    torch.set_num_threads(max(1, args.threads))
    settings = load_settings(args.config or CONFIG)
    if args.problems is not None:
        if args.problems < 1:
            raise JudgekitError(f"--problems must be >= 1, got {args.problems}")
        settings = replace(settings, problems=args.problems)
    if args.quick:
        settings = quick(settings, args.problems or 3)
    if args.tasks:
        names = [t.strip() for t in args.tasks.split(",") if t.strip()]
        unknown = [n for n in names if n not in {t.name for t in settings.tasks}]
        if unknown:
            raise JudgekitError(f"--tasks: {', '.join(unknown)} not in the config's tasks")
        settings = replace(settings, tasks=tuple(t for t in settings.tasks if t.name in names))
    start = time.perf_counter()
    result = reproduce(Path(args.out), settings, log=lambda m: print(m, flush=True))
    print((Path(args.out) / "findings.md").read_text())
    print(f"done in {time.perf_counter() - start:.0f} s ({len(result['rows'])} findings)")
    return 0


def register(sub) -> None:
    p = sub.add_parser("reproduce", help="the paper's experiments on the pocket world, with a findings table",
                       description="Mine the judges' training problems, train the 9:1 and 1:9 math:code judges, "
                                   "evaluate the sweeps of judgekit/configs/reproduce.toml on every task (Figure 4, "
                                   "Tables 1-2, Figure 6), Lemma 1 on synthetic pairs (Figure 5), then write "
                                   "findings.md: each paper finding's paired difference, its 95 %% interval and "
                                   "the verdict it implies. Rerunning with the same --out resumes every stage.")
    p.add_argument("--out", required=True, help="output directory (mined/, judges/, eval/, analyze/, findings.md)")
    p.add_argument("--config", help="recipe TOML (default: judgekit/configs/reproduce.toml)")
    p.add_argument("--problems", type=int, help="held-out problems per task (default: the config's, 300)")
    p.add_argument("--tasks", help="only these of the config's tasks, comma-separated")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: a few problems (or --problems), short generations, 2 judge epochs")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.set_defaults(func=run)
