"""`judgekit judge show|push`: what a judge is (feature spec, models, training mix, metrics); sharing it on a hub.

A judge directory is a model repo as it stands (weights, config, card README.md), so `push` uploads the
directory with ``huggingface_hub.HfApi.upload_folder`` and any command that takes ``--judge`` accepts the
repo id back (``owner/name[@revision]``, fetched with ``snapshot_download``)."""

from __future__ import annotations

import json
from pathlib import Path


def describe(judge_dir: str | Path) -> str:
    from judgekit.judge.head import load_judge
    from judgekit.judge.metrics import format_metrics

    from judgekit.judge.head import resolve_judge_dir

    path = resolve_judge_dir(judge_dir)
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


def push(judge_dir: str | Path, repo: str, *, private: bool = False, message: str | None = None) -> str:
    """Upload a (validated, hash-checked) judge directory to the hub repo `repo`; returns the commit URL."""
    from judgekit.errors import JudgekitError
    from judgekit.judge.head import load_judge

    path = Path(judge_dir)
    if not path.is_dir():
        raise JudgekitError(f"{path} is not a local judge directory")
    load_judge(path)  # never share a corrupt or unreadable judge
    try:
        from huggingface_hub import HfApi

        api = HfApi()
        api.create_repo(repo, repo_type="model", private=private, exist_ok=True)
        info = api.upload_folder(folder_path=str(path), repo_id=repo, repo_type="model",
                                 commit_message=message or f"judgekit judge from {path.name}",
                                 ignore_patterns=[".*", "**/.*"])
    except Exception as err:  # noqa: BLE001 - hub errors (auth, network, name) come in many types
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise JudgekitError(f"cannot push {path} to {repo}: {first}") from None
    return str(getattr(info, "commit_url", info))


def run_push(args) -> int:
    url = push(args.judge_dir, args.repo, private=args.private, message=args.message)
    print(f"judge {args.judge_dir} -> {args.repo} ({url})")
    return 0


def register(sub) -> None:
    p = sub.add_parser("judge", help="inspect trained judges", description="Inspect trained judge directories.")
    jsub = p.add_subparsers(dest="judge_command", metavar="ACTION", required=True)
    show = jsub.add_parser("show", help="print a judge's feature spec, models, mix and validation metrics")
    show.add_argument("judge_dir", help="a judge directory, or a hub repo id (owner/name[@revision])")
    show.set_defaults(func=run)
    up = jsub.add_parser("push", help="upload a judge directory to a model hub repo (huggingface_hub)",
                         description="Upload a judge directory (weights, config, card) to a hub model repo, "
                                     "creating it if needed; `--judge owner/name` then loads it anywhere.")
    up.add_argument("judge_dir")
    up.add_argument("repo", help="hub repo id, owner/name")
    up.add_argument("--private", action="store_true", help="create the repo private")
    up.add_argument("--message", help="commit message")
    up.set_defaults(func=run_push)
