"""`judgekit mine`: semi-greedy counterfactual mining into a resumable, sharded Parquet directory."""

from __future__ import annotations

import os
import time

from judgekit.commands._args import add_config_arg, add_model_args, add_task_args, with_config
from judgekit.config import loading_options, task_options
from judgekit.errors import JudgekitError


def parse_layers(text: str) -> tuple[int, ...]:
    try:
        layers = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise JudgekitError(f"--layers takes comma-separated integers such as -1,12; got {text!r}") from None
    if not layers or len(set(layers)) != len(layers):
        raise JudgekitError(f"--layers needs distinct layer indexes; got {text!r}")
    return layers


def process_started() -> float:
    """The time.monotonic() at which this process started (Linux, from /proc), else now.

    The run's recorded wall time then covers interpreter start-up, imports and model loading, like `time`."""
    now = time.monotonic()
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22: start time in clock ticks
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return now - max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return now


def run(args) -> int:
    started = process_started()
    args = with_config(args)
    import torch

    from judgekit.dist import distributed_env, rank_device
    from judgekit.mine.miner import MineConfig, mine_to_dir
    from judgekit.models import load_model_pair
    from judgekit.store.shards import MINED, require_kind
    from judgekit.tasks import get_task

    layers = parse_layers(args.layers)
    if args.batch_size < 1:
        raise JudgekitError("--batch-size must be >= 1")
    if args.max_new_tokens < 1:
        raise JudgekitError("--max-new-tokens must be >= 1")
    if args.threads is not None and args.threads < 1:
        raise JudgekitError("--threads must be >= 1")
    require_kind(args.out, MINED)  # before any model loads
    env = distributed_env()
    rank, world = env.rank, env.world_size
    if args.threads:
        torch.set_num_threads(args.threads)
    task = get_task(args.task, **task_options(args))
    if args.split is None:  # train where the task has one, else its first split (bfcl, include: test)
        args.split = "train" if "train" in task.splits else task.splits[0]
    problems = task.load(args.split, limit=args.limit, data_file=args.data_file)
    pair = load_model_pair(args.target, args.draft, rank_device(args.device, env), args.dtype, **loading_options(args))
    cfg = MineConfig(max_new_tokens=args.max_new_tokens, layers=layers, draft_features=args.draft_features,
                     chat_template=not args.no_chat_template)
    summary = mine_to_dir(pair, task, problems, args.out, cfg, split=args.split, data_file=args.data_file,
                          limit=args.limit, rank=rank, world_size=world, resume=args.resume,
                          flush_every=args.flush_every, progress=not args.quiet, batch_size=args.batch_size,
                          compact=not args.no_compact, started=started)
    print(f"rank {rank}/{world}: mined {summary['mined']} problems ({summary['skipped']} already done), "
          f"{summary['mismatches']} mismatches, {summary['important']} important -> {args.out}")
    res = summary["compaction"]
    if isinstance(res, str):
        print(f"rank {rank}/{world}: not compacted: {res}")
    elif res is not None and res.commits:
        print(f"rank {rank}/{world}: compacted {res.commits} commits into {res.files_after} data files "
              f"in {res.seconds:.1f}s")
    return 0


def register(sub) -> None:
    p = sub.add_parser("mine", help="label draft/target mismatches by counterfactual substitution",
                       description="Semi-greedy counterfactual mining (AutoJudge) with hidden-state features. "
                                   "Resumable (--resume) and sharded across ranks under torchrun.")
    add_config_arg(p)
    p.add_argument("--task", required=True, help="task name (see `judgekit tasks`)")
    add_model_args(p, loading=True)
    p.add_argument("--out", required=True, help="output directory of Parquet shards")
    p.add_argument("--split", help="default: train, or the task's first split where it has no train split")
    p.add_argument("--limit", type=int, help="first N problems of the split")
    p.add_argument("--data-file", help="local JSONL/Parquet file instead of the hub")
    add_task_args(p)
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=1,
                   help="problems advanced together, their forwards batched (useful on a GPU)")
    p.add_argument("--layers", default="-1", help="hidden-state layers to keep, e.g. -1 or -1,12 "
                                                  "(indexes into transformers' hidden_states; -1 = final)")
    p.add_argument("--draft-features", action="store_true", help="also keep the draft's hidden state")
    p.add_argument("--resume", action="store_true", help="continue an interrupted run in --out")
    p.add_argument("--flush-every", type=int, default=4,
                   help="problems per commit (what a crash can lose); compaction merges the commits at the end")
    p.add_argument("--no-compact", action="store_true",
                   help="keep the small per-commit shards (compact later with `judgekit data compact`)")
    p.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's choice)")
    p.add_argument("--no-chat-template", action="store_true")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)
