"""`judgekit pocket train|eval`: rebuild the pocket world's target/draft pair and measure it (docs/design.md §6)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from judgekit.commands._args import add_model_args


def register(subparsers) -> None:
    parser = subparsers.add_parser("pocket", help="train or evaluate the pocket world's target/draft pair")
    sub = parser.add_subparsers(dest="pocket_command", metavar="ACTION")

    train = sub.add_parser("train", help="build the tokenizer and train the target and draft models")
    train.add_argument("--out", type=Path, default=None, help="output directory (default: data/pocket)")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--device", default="auto", help="auto, cpu or cuda")
    train.add_argument("--only", choices=("target", "draft"), default=None,
                       help="train one model (two processes can then train the pair side by side)")
    train.add_argument("--recipe", choices=("shipped", "hard"), default="shipped",
                       help="shipped: the pocket pair from scratch (out/target, out/draft); hard: fine-tune copies "
                            "of the shipped pair on pocket-math-hard (out/hard-target, out/hard-draft)")
    train.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 is fastest on a shared CPU)")
    train.add_argument("--target-steps", type=int, default=None)
    train.add_argument("--draft-steps", type=int, default=None)
    train.add_argument("--checkpoint-every", type=int, default=0, help="also save checkpoints every N steps")
    train.add_argument("--checkpoint-dir", type=Path, default=None)
    train.set_defaults(func=_train)

    ev = sub.add_parser("eval", help="accuracy, pass@1, block efficiency and mismatch counts on held-out problems")
    add_model_args(ev, required=False, target="pocket-target", draft="pocket-draft", device=False)
    ev.add_argument("--limit", type=int, default=200, help="held-out problems per task")
    ev.add_argument("--mismatch-limit", type=int, default=40, help="problems per task for the mismatch count")
    ev.add_argument("--gamma", type=int, default=8)
    ev.add_argument("--oracle-limit", type=int, default=50,
                    help="problems per task for oracle-judge speculative decoding (0: skip)")
    ev.add_argument("--tasks", default="pocket-math,pocket-code",
                    help="tasks to measure, comma-separated (e.g. pocket-math-hard for the hard pair)")
    ev.add_argument("--seed", type=int, default=0)
    ev.add_argument("--threads", type=int, default=1)
    ev.add_argument("--json", type=Path, default=None, help="also write the numbers to this JSON file")
    ev.set_defaults(func=_eval)
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])


def _train(args: argparse.Namespace) -> int:
    from judgekit.pocket import POCKET_DIR
    from judgekit.pocket.train import default_specs, hard_specs, train_pair

    prefix = "hard-" if args.recipe == "hard" else ""
    specs = hard_specs() if prefix else default_specs()
    for name, steps in ((prefix + "target", args.target_steps), (prefix + "draft", args.draft_steps)):
        if steps:  # a full schedule of that many steps (not a stop inside the default cosine horizon)
            specs[name].steps, specs[name].schedule_steps = steps, None
    which = tuple(prefix + n for n in ((args.only,) if args.only else ("target", "draft")))
    start = time.time()
    results = train_pair(args.out or POCKET_DIR, seed=args.seed, device=args.device, specs=specs,
                         which=which, threads=args.threads, checkpoint_every=args.checkpoint_every,
                         checkpoint_dir=args.checkpoint_dir, log=lambda m: print(m, flush=True))
    print(json.dumps({"wall_seconds": round(time.time() - start, 1),
                      **{k: {"parameters": v["parameters"], "train_seconds": v["train_seconds"]}
                         for k, v in results.items()}}))
    return 0


def _eval(args: argparse.Namespace) -> int:
    from judgekit.pocket.evaluate import evaluate_pair

    report = evaluate_pair(args.target, args.draft, limit=args.limit, mismatch_limit=args.mismatch_limit,
                           gamma=args.gamma, seed=args.seed, threads=args.threads,
                           oracle_limit=args.oracle_limit,
                           tasks=[t.strip() for t in args.tasks.split(",") if t.strip()],
                           log=lambda m: print(m, file=sys.stderr, flush=True))
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0
