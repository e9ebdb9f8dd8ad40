"""`judgekit judge show`: what a judge is (feature spec, models, training mix) and how well it did."""

from __future__ import annotations

import json
from pathlib import Path


def describe(judge_dir: str | Path) -> str:
    from judgekit.judge.head import load_judge
    from judgekit.judge.metrics import format_metrics

    path = Path(judge_dir)
    judge = load_judge(path)
    c = judge.config
    head = c.get("head", "linear" if type(judge).__name__ == "LinearJudge" else "mlp")
    draft = f" + draft hidden [{c['draft_hidden_size']}]" if judge.uses_draft else ""
    lines = [
        f"judge {path} (schema v{c.get('schema_version', 1)})",
        f"  head         {head}" + (f" (hidden {c['mlp_hidden']})" if c.get("mlp_hidden") else ""),
        f"  features     target hidden_states[{judge.layer}] [{judge.hidden_size}]{draft}",
        f"  models       target {c.get('target_model', '?')}, draft {c.get('draft_model', '?')}",
    ]
    mix = c.get("mix")
    if mix:
        realised = ", ".join(f"{k} {v:.1%}" for k, v in mix.get("realised", {}).items())
        lines.append(f"  mix          {mix.get('requested')} at {mix.get('budget')} {mix.get('unit')}: {realised}")
    data = c.get("data")
    if data:
        lines.append(f"  data         train {data['train_rows']} mismatches ({data['train_important']} important), "
                     f"validation {data['val_rows']} ({data['val_important']} important)")
    metrics_file = path / "metrics.json"
    if metrics_file.is_file():
        lines.append(format_metrics(json.loads(metrics_file.read_text())))
    elif c.get("thresholds"):
        lines += [f"  threshold {k:<10} {v:.4f}" for k, v in c["thresholds"].items()]
    else:
        lines.append("  no metrics or thresholds recorded (a judge written before `judgekit train`)")
    return "\n".join(lines)


def run(args) -> int:
    print(describe(args.judge_dir))
    return 0


def register(sub) -> None:
    p = sub.add_parser("judge", help="inspect trained judges", description="Inspect trained judge directories.")
    jsub = p.add_subparsers(dest="judge_command", metavar="ACTION", required=True)
    show = jsub.add_parser("show", help="print a judge's feature spec, models, mix and validation metrics")
    show.add_argument("judge_dir")
    show.set_defaults(func=run)
