"""`judgekit train`: a judge head from mined mismatches, with mixture-ratio control (one mix or a sweep)."""

from __future__ import annotations

import json
from pathlib import Path

from judgekit.commands._args import add_config_arg, with_config
from judgekit.errors import JudgekitError


def _devices(text: str):
    return int(text) if text.isdigit() else text


def _config(args):
    from judgekit.judge.train import TrainConfig

    return TrainConfig(head=args.head, mlp_hidden=args.mlp_hidden, lr=args.lr, weight_decay=args.weight_decay,
                       batch_size=args.batch_size, max_epochs=args.max_epochs, patience=args.patience,
                       seed=args.seed, accelerator=args.accelerator, devices=_devices(args.devices),
                       strategy=args.strategy, num_nodes=args.num_nodes, progress=not args.quiet,
                       logger=args.logger, quiet=args.quiet)


def _check_out(out: Path, *, sweep: bool, force: bool, resume: bool) -> None:
    """Refuse, before any data is read, an --out that is an eval or mining directory, something else that is
    not a judge (or, for a sweep, a judge), and a judge or sweep that would be overwritten without --force."""
    from judgekit.judge.head import output_kind

    kind = output_kind(out)
    if kind in ("eval", "mined"):
        raise JudgekitError(f"--out {out} is {'an evaluation' if kind == 'eval' else 'a mining'} directory; refusing "
                            "to write a judge there (choose another --out)")
    if not sweep and kind == "other":
        raise JudgekitError(f"--out {out} is a non-empty directory that is not a judge; refusing to write a judge "
                            "there (choose another --out)")
    from judgekit.judge.train import work_dir

    if not sweep and kind == "judge" and not (force or resume) and not work_dir(out).exists():
        raise JudgekitError(f"--out {out} already holds a judge; pass --force to replace it")
    if sweep and kind == "judge":
        raise JudgekitError(f"--out {out} is a judge directory; a --mix-sweep writes a directory of judges")
    if sweep and (out / "sweep.json").exists() and not (force or resume):
        raise JudgekitError(f"--out {out} already holds a sweep; pass --force to replace its judges")
    if sweep and kind == "other" and not (out / "sweep.json").exists() and not (force or resume) \
            and not any(p.name.startswith("mix-") or p.name.startswith(".mix-") for p in out.iterdir()):
        raise JudgekitError(f"--out {out} is a non-empty directory that is not a sweep; choose another --out")


def run(args) -> int:
    args = with_config(args)
    from judgekit.judge import data as jd
    from judgekit.judge import train as tj
    if args.budget is not None and args.budget < 1:
        raise JudgekitError("--budget must be >= 1")
    if args.mix and args.mix_sweep:
        raise JudgekitError("give --mix or --mix-sweep, not both")
    if args.resume and args.force:
        raise JudgekitError("give --resume or --force, not both")
    if args.head == "mlp" and args.mlp_hidden < 1:
        raise JudgekitError(f"--mlp-hidden must be >= 1 (got {args.mlp_hidden}: the head would be a constant)")
    out = Path(args.out)
    _check_out(out, sweep=bool(args.mix_sweep), force=args.force, resume=args.resume)
    sources, split, spec = jd.prepare(args.data, layer=args.layer, features=args.features,
                                      val_fraction=args.val_fraction, seed=args.seed)
    avail = jd.available_units(sources, split, args.unit)
    cfg = _config(args)
    if not args.mix_sweep:
        if args.mix:
            text, mix = args.mix, jd.parse_mix(args.mix, len(sources))
        else:  # no mix asked: every training problem of every source, in its natural proportion
            text, mix = "natural", tuple(float(a) for a in avail)
        data = jd.build_data(sources, jd.select(sources, split, text, mix, args.budget, args.unit), spec,
                             args.feature_cache)
        tj.train_one(data, cfg, out, resume=args.resume, force=args.force)
        return 0
    mixes = jd.parse_sweep(args.mix_sweep, len(sources))
    budget = args.budget or min(jd.max_budget(m, avail) for _t, m in mixes)
    selections = [jd.select(sources, split, t, m, budget, args.unit) for t, m in mixes]  # all feasible first
    rows, is_zero = [], True
    for sel in selections:
        data = jd.build_data(sources, sel, spec, args.feature_cache)
        res = tj.train_one(data, cfg, out / jd.mix_label(sel.mix_text), resume=args.resume, force=args.force)
        is_zero = res.is_global_zero
        per = res.metrics.get("per_source", {})
        rows.append({"mix": sel.mix_text, "budget": sel.budget, "unit": sel.unit, "dir": jd.mix_label(sel.mix_text),
                     "shares": {r["source"]: r["share"] for r in sel.realised},
                     "auroc": res.metrics["auroc"], "average_precision": res.metrics["average_precision"],
                     "per_source": {n: per.get(n, {}).get("auroc") for n in data.source_names},
                     "thresholds": res.config["thresholds"]})
    if is_zero:
        names = [s.name for s in sources]
        table = tj.sweep_summary(rows, names)
        (out / "sweep.json").write_text(json.dumps(rows, indent=2) + "\n")
        (out / "sweep.md").write_text("```\n" + table + "\n```\n")
        print(table)
        print(f"sweep -> {out} (one judge per mix, summary in sweep.json / sweep.md)")
    return 0


def register(sub) -> None:
    p = sub.add_parser("train", help="train a judge head on mined mismatches (mixture-ratio control)",
                       description="Train a judge head (Lightning) on the Parquet shards written by `judgekit mine`. "
                                   "The split is by problem; --mix sets each source's share of a fixed budget.")
    add_config_arg(p)
    p.add_argument("--data", nargs="+", required=True, metavar="DIR[,DIR...]",
                   help="one source per argument: a mining directory, or several of one task joined by commas")
    p.add_argument("--out", required=True, help="judge directory (with --mix-sweep: a directory of judges)")
    p.add_argument("--mix", help="shares of the training budget per source, in --data order, e.g. 9:1 "
                                 "(default: all training problems, natural proportions)")
    p.add_argument("--mix-sweep", help="comma-separated mixes trained at one budget, e.g. 9:1,7:3,5:5,3:7,1:9")
    p.add_argument("--budget", type=int, help="training units in total (default: the largest feasible)")
    p.add_argument("--unit", choices=["problems", "mismatches"], default="problems",
                   help="what --budget and --mix count (default: problems with at least one mismatch)")
    p.add_argument("--head", choices=["linear", "mlp"], default="linear")
    p.add_argument("--mlp-hidden", type=int, default=256, help="hidden width of the mlp head")
    p.add_argument("--features", choices=["target", "target+draft"], default="target",
                   help="target hidden state only, or with the draft's (needs `mine --draft-features`)")
    p.add_argument("--layer", type=int, help="mined layer to read, as named by `mine --layers` (default -1)")
    p.add_argument("--val-fraction", type=float, default=0.2, help="share of each source's problems held out")
    p.add_argument("--max-epochs", type=int, default=100)
    p.add_argument("--patience", type=int, default=10, help="early stopping on validation AUROC")
    p.add_argument("--batch-size", type=int, default=256, help="global batch (split across devices)")
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--weight-decay", type=float, default=1e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--accelerator", default="auto", help="Lightning accelerator: auto, cpu, gpu, ...")
    p.add_argument("--devices", default="auto", help="Lightning devices: auto, 1, 2, ...")
    p.add_argument("--strategy", default="auto", help="Lightning strategy: auto, ddp, ...")
    p.add_argument("--num-nodes", type=int, default=1)
    p.add_argument("--feature-cache", metavar="DIR", help="memory-map the selected features (.npy) in DIR instead of "
                                                          "holding them in RAM (data larger than memory)")
    p.add_argument("--logger", choices=["csv", "tensorboard", "wandb", "none"], default="csv",
                   help="training logs in <out>/logs: csv (default), tensorboard (needs tensorboardX or tensorboard), "
                        "wandb (needs wandb; WANDB_MODE=offline keeps it local), none")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted run of the same settings and data from its last checkpoint")
    p.add_argument("--force", action="store_true",
                   help="replace an existing judge (or sweep) at --out and discard an interrupted run")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no Lightning info, tips or warnings")
    p.set_defaults(func=run)
