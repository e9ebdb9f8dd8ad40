"""`judgekit eval`: a sweep of rules and parameters over a task's problems -> records, summary and plots.

Settings come from the command line, a TOML/YAML config file (``--config``), or both (a flag given on the
command line overrides the config's value everywhere). A config may hold several ``[[sweep]]`` tables, each a
set of rules with their parameter lists, sharing the task and the models.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from judgekit.commands._args import add_model_args, add_rule_args, add_sampling_args, loading_options
from judgekit.errors import JudgekitError

# Keys a sweep may vary (config names; the CLI spells them with dashes), and the shared run settings.
SWEEP_KEYS = ("rule", "judge", "lenience", "lam", "fuzzy_threshold", "divergence", "judge_threshold", "p_base",
              "epsilon", "delta", "temperature", "block_size", "seeds")
RUN_KEYS = ("task", "target", "draft", "device", "dtype", "split", "data_file", "limit", "max_new_tokens",
            "top_k", "top_p", "chat_template", "out", "threads", "flush_every", "title", "batch_size", "grade_workers",
            "revision", "draft_revision", "trust_remote_code", "device_map")
RUN_DEFAULTS: dict[str, Any] = {"device": "auto", "dtype": "auto", "split": "test", "data_file": None,
                                "limit": None, "max_new_tokens": 256, "top_k": None, "top_p": None,
                                "chat_template": True, "threads": None, "flush_every": 16, "title": "",
                                "batch_size": 1, "grade_workers": 4,
                                "revision": None, "draft_revision": None, "trust_remote_code": False, "device_map": None}
_ALIASES = {"rules": "rule", "judges": "judge", "temperatures": "temperature", "block_sizes": "block_size",
            "seed": "seeds"}


def rule_defaults() -> dict[str, Any]:
    """The rule flags' defaults, read from `judgekit generate`'s parser so both commands agree."""
    from judgekit.commands.generate import add_rule_args as _add

    p = argparse.ArgumentParser()
    _add(p)
    d = vars(p.parse_args([]))
    return {k: d[k] for k in SWEEP_KEYS if k in d and k not in ("rule", "judge")}


def load_config(path: str | Path) -> dict[str, Any]:
    """A TOML (.toml) or YAML (.yaml/.yml) config -> dict with canonical key names; unknown keys are errors."""
    path = Path(path)
    if not path.is_file():
        raise JudgekitError(f"config file {path} does not exist")
    try:
        if path.suffix == ".toml":
            import tomllib

            data = tomllib.loads(path.read_text())
        elif path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(path.read_text()) or {}
        else:
            raise JudgekitError(f"config {path}: use a .toml or .yaml file")
    except JudgekitError:
        raise
    except Exception as err:  # noqa: BLE001 - tomllib and PyYAML raise their own error types
        raise JudgekitError(f"cannot parse config {path}: {err}") from None
    if not isinstance(data, dict):
        raise JudgekitError(f"config {path}: expected a table of settings at the top level")
    return _canonical(data, f"config {path}", top=True)


def _canonical(data: dict, where: str, top: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    allowed = set(SWEEP_KEYS) | (set(RUN_KEYS) | {"sweep"} if top else set())
    for key, value in data.items():
        k = _ALIASES.get(key.replace("-", "_"), key.replace("-", "_"))
        if k not in allowed:
            raise JudgekitError(f"{where}: unknown setting {key!r} (allowed: {', '.join(sorted(allowed))})")
        if k == "sweep":
            if not isinstance(value, list) or not all(isinstance(s, dict) for s in value):
                raise JudgekitError(f"{where}: 'sweep' must be a list of tables")
            value = [_canonical(s, f"{where} sweep {i + 1}", top=False) for i, s in enumerate(value)]
        elif k in SWEEP_KEYS and not isinstance(value, list):
            value = [value]
        out[k] = value
    return out


def _cli_values(args) -> dict[str, Any]:
    """Settings given on the command line (argparse leaves the others None)."""
    got = {k: getattr(args, k, None) for k in set(SWEEP_KEYS) | set(RUN_KEYS)}
    if args.no_chat_template:
        got["chat_template"] = False
    return {k: v for k, v in got.items() if v is not None}


def resolve(args) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(run settings, sweeps): defaults < config file < command line."""
    config = load_config(args.config) if args.config else {}
    cli = _cli_values(args)
    run = {**RUN_DEFAULTS, **{k: v for k, v in config.items() if k in RUN_KEYS},
           **{k: v for k, v in cli.items() if k in RUN_KEYS}}
    for key in ("limit", "max_new_tokens", "top_k", "threads", "flush_every", "batch_size", "grade_workers"):
        if run.get(key) is not None and (isinstance(run[key], bool) or not isinstance(run[key], int)):
            raise JudgekitError(f"setting {key!r} must be an integer, got {run[key]!r}")
    for key in ("task", "target", "draft", "out"):
        if not run.get(key):
            raise JudgekitError(f"--{key} is required (on the command line or in the config file)")
    top = {k: v for k, v in config.items() if k in SWEEP_KEYS}
    given = {k: v for k, v in cli.items() if k in SWEEP_KEYS}
    defaults = {**rule_defaults(), "temperature": [0.0], "block_size": [8], "seeds": [0]}
    sweeps = []
    for entry in config.get("sweep") or [{}]:
        s = {**top, **entry, **given}
        if not s.get("rule"):
            raise JudgekitError("--rule is required (one or more rule names, on the command line or in the config)")
        for k, v in defaults.items():
            s.setdefault(k, v if isinstance(v, list) else [v])
        sweeps.append(s)
    return run, sweeps


def build_points(sweeps: list[dict[str, Any]]):
    from judgekit.evaluate.sweep import RULE_PARAM_KEYS, Sweep

    points = []
    for s in sweeps:
        sweep = Sweep(rules=list(s["rule"]), values={k: list(s[k]) for k in RULE_PARAM_KEYS if k in s},
                      judges=[str(j) for j in s.get("judge") or []],
                      temperatures=[float(t) for t in s["temperature"]],
                      block_sizes=[int(g) for g in s["block_size"]], seeds=[int(x) for x in s["seeds"]])
        points.extend(sweep.points())
    unique = {p.key: p for p in points}
    return list(unique.values())


def write_outputs(out_dir: Path, rows: list[dict], title: str = "") -> list[Path]:
    """summary.md, summary.csv and the plots (atomically: readers never see half a file)."""
    from judgekit.evaluate.summary import summary_csv, summary_markdown
    from judgekit.evaluate.plots import plot_tradeoff, plot_truncation
    from judgekit.provenance import summary_footer
    from judgekit.store.atomic import atomic_write_bytes

    written = []
    for name, text in (("summary.md", summary_markdown(rows, title) + summary_footer(out_dir)), ("summary.csv", summary_csv(rows))):
        atomic_write_bytes(out_dir / name, text.encode(), 0)
        written.append(out_dir / name)
    written.append(plot_tradeoff(rows, out_dir / "be_quality.png", title))
    trunc = plot_truncation(rows, out_dir / "truncation.png", title)
    if trunc:
        written.append(trunc)
    return written


def skip_missing_judges(sweeps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For --dry-run of a recipe whose judges are not trained yet: drop judge directories that do not exist
    (with a note), and the judge rule where none is left."""
    out = []
    for s in sweeps:
        judges = [str(j) for j in s.get("judge") or []]
        kept = [j for j in judges if (Path(j) / "judge_config.json").is_file()]
        for j in sorted(set(judges) - set(kept)):
            log(f"dry run: judge {j} does not exist yet; its points are skipped")
        rules = [r for r in s["rule"] if r != "judge" or kept]
        if rules:
            out.append({**s, "judge": kept, "rule": rules})
    return out


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run(args, pair=None, sweep_filter=None) -> int:
    """The command. `pair` (already loaded, e.g. by `judgekit demo`) must match --target/--draft;
    `sweep_filter` may edit the resolved sweeps (the demo drops the judge rule when no judge could be trained)."""
    from judgekit.commands.mine import distributed_env
    from judgekit.evaluate.sweep import EvalSettings
    from judgekit.evaluate.summary import json_rows, summarize, summary_markdown
    from judgekit.evaluate.run import run_eval
    from judgekit.progress import EvalProgress
    from judgekit.store.records import read_records
    from judgekit.tasks import get_task

    settings, sweeps = resolve(args)
    tasks = [t.strip() for t in str(settings["task"]).split(",") if t.strip()]
    if len(tasks) > 1:  # --task a,b: one run directory per task under --out
        return max(run(argparse.Namespace(**{**vars(args), "task": t, "out": str(Path(settings["out"]) / t)}),
                       pair, sweep_filter) for t in tasks)
    if sweep_filter is not None:
        sweeps = sweep_filter(sweeps)
    if args.dry_run:
        sweeps = skip_missing_judges(sweeps)
    points = build_points(sweeps)
    task = get_task(settings["task"])
    problems = task.load(settings["split"], limit=settings["limit"], data_file=settings["data_file"])
    if not problems:
        raise JudgekitError(f"no problems in {settings['task']} split {settings['split']}")
    rank, world, local = distributed_env()
    if args.dry_run:
        print(f"{settings['task']}: {len(problems)} problems x {len(points)} points = "
              f"{len(problems) * len(points)} decodings -> {settings['out']}")
        for p in points:
            print(f"  {p.label}  T={p.temperature:g} gamma={p.block_size} seed={p.seed}")
        return 0
    if min(settings["flush_every"], settings["max_new_tokens"], settings["batch_size"], settings["grade_workers"]) < 1:
        raise JudgekitError("--flush-every, --max-new-tokens, --batch-size and --grade-workers must be >= 1")
    import torch

    from judgekit.models import load_model_pair

    if settings["threads"]:
        torch.set_num_threads(settings["threads"])
    device = settings["device"]
    if device == "auto" and world > 1 and torch.cuda.is_available():
        device = f"cuda:{local % torch.cuda.device_count()}"
    run_settings = EvalSettings(settings["task"], settings["target"], settings["draft"], settings["split"],
                                settings["data_file"], settings["limit"], settings["max_new_tokens"],
                                settings["top_k"], settings["top_p"], settings["chat_template"])
    if pair is None:
        pair = load_model_pair(settings["target"], settings["draft"], device, settings["dtype"], **loading_options(settings))
    quiet = args.quiet
    log(f"rank {rank}/{world}: {len(points)} points x {len(problems)} problems -> {settings['out']}")
    counts = run_eval(pair, task, problems, points, run_settings, settings["out"], rank=rank, world_size=world,
                      flush_every=settings["flush_every"], progress=None if quiet else log,
                      batch_size=settings["batch_size"], grade_workers=settings["grade_workers"],
                      bars=None if quiet else EvalProgress(0, enabled=True if args.progress else None))
    log(f"rank {rank}/{world}: evaluated {counts['evaluated']} (point, problem) pairs, "
        f"{counts['skipped']} already done")
    out_dir = Path(settings["out"])
    records = read_records(out_dir)
    keys, ids = {p.key for p in points}, {p.problem_id for p in problems}
    mask = [pt in keys and pr in ids for pt, pr in zip(records.column("point").to_pylist(),
                                                        records.column("problem").to_pylist())]
    import pyarrow as pa

    records = records.filter(pa.array(mask, type=pa.bool_()))
    if records.num_rows < len(points) * len(problems):
        # Another rank is still running; the last rank to finish writes the summary.
        log(f"rank {rank}/{world}: {records.num_rows}/{len(points) * len(problems)} pairs recorded so far; "
            "the summary is written by the last rank to finish")
        return 0
    rows = summarize(records)
    for path in write_outputs(out_dir, rows, settings["title"]):
        log(f"wrote {path}")
    print(json.dumps(json_rows(rows)) if args.json else summary_markdown(rows, settings["title"]))
    args.summary_rows = rows  # for callers such as `judgekit demo`
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "eval", help="evaluate rules on a task: per-problem records, summary with 95%% intervals, plots",
        description="Speculative decoding of a task's problems for every point of a sweep (rules x parameter "
                    "lists x temperatures x block sizes x seeds); grades each completion, records it in "
                    "Parquet (resumable; sharded across ranks under torchrun), then writes summary.md, "
                    "summary.csv, be_quality.png and truncation.png in --out. Comma lists sweep: "
                    "--lenience 0.2,0.4 --judge-threshold p20,p40,0.3 --temperature 0,1.0.")
    p.add_argument("--config", help="TOML or YAML file with the same settings (flags override it)")
    p.add_argument("--task", help="task name (see `judgekit tasks`); several comma-separated (a,b): one run "
                                  "directory per task under --out")
    add_model_args(p, required=False, loading=True)
    p.add_argument("--split", help="split of the task (default test)")
    p.add_argument("--data-file", help="local JSONL/Parquet file of problems instead of the default source")
    p.add_argument("--limit", type=int, help="first N problems of the split")
    add_rule_args(p, sweep=True)
    add_sampling_args(p, sweep=True)
    p.add_argument("--out", help="evaluation directory (records, summary, plots); a rerun resumes it")
    p.add_argument("--title", help="title of the summary and the plots")
    p.add_argument("--flush-every", type=int, help="records per committed shard (default 16)")
    p.add_argument("--threads", type=int, help="CPU threads for torch")
    p.add_argument("--batch-size", type=int,
                   help="problems decoded together in lockstep on the fast path (default 1); greedy records do "
                        "not depend on it")
    p.add_argument("--grade-workers", type=int,
                   help="threads grading finished problems while decoding goes on (default 4; code tasks run "
                        "each program in the sandbox)")
    p.add_argument("--dry-run", action="store_true",
                   help="check the config, load the problems and list the points; load no model")
    p.add_argument("--quiet", action="store_true", help="no per-point progress on stderr")
    p.add_argument("--progress", action="store_true",
                   help="progress bars even when stderr is not a terminal (they are on in a terminal by default)")
    p.add_argument("--json", action="store_true", help="print the summary rows as JSON")
    p.set_defaults(func=run, device=None, dtype=None)  # None: not given, so a config file's value holds
