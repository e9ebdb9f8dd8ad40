"""One `judgekit eval` run as a library call: settings resolved and checked, then decoded, summarised, written.

:func:`prepare` runs every check the run makes (settings, rules and judges, sampling settings, the problems,
the output directory's manifest) and writes nothing, so `--dry-run` refuses exactly what the run refuses and a
refused run leaves --out untouched. :func:`run` then decodes with the prepared points and returns the summary
rows (None while another rank is still working), which `judgekit eval` prints and `judgekit demo` reuses.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from judgekit.errors import JudgekitError
from judgekit.evaluate.sweep import EvalPoint, EvalSettings, build_points, resolve_eval


@dataclass
class EvalJob:
    settings: dict[str, Any]  # the resolved run settings (judgekit.config.EVAL_RUN keys)
    points: list[EvalPoint]
    task: Any
    problems: list
    run_settings: EvalSettings
    judges: dict = field(default_factory=dict)  # judge directory -> (judge, digest), read once

    @property
    def out(self) -> Path:
        return Path(self.settings["out"])


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def prepare(config_path: str | None, given: dict[str, Any],
            sweep_filter: Callable[[list[dict]], list[dict]] | None = None) -> EvalJob:
    """Resolve and check everything a run needs except the models. ``sweep_filter`` may edit the resolved
    sweeps (the demo drops the judge rule when no judge could be trained)."""
    from judgekit.decode.sampling import SamplingConfig
    from judgekit.evaluate.run import eval_fingerprint
    from judgekit.store.records import check_eval_dir
    from judgekit.config import task_options
    from judgekit.tasks import get_task

    settings, sweeps = resolve_eval(config_path, given)
    if sweep_filter is not None:
        sweeps = sweep_filter(sweeps)
    judges: dict = {}
    points = build_points(sweeps, judges)
    for temperature in sorted({p.temperature for p in points}):
        SamplingConfig(temperature, settings["top_k"], settings["top_p"])  # the decoder's own checks
    task = get_task(settings["task"], **task_options(settings))
    problems = task.load(settings["split"], limit=settings["limit"], data_file=settings["data_file"])
    if not problems:
        raise JudgekitError(f"no problems in {settings['task']} split {settings['split']}")
    run_settings = EvalSettings(settings["task"], settings["target"], settings["draft"], settings["split"],
                                settings["data_file"], settings["limit"], settings["max_new_tokens"],
                                settings["top_k"], settings["top_p"], settings["chat_template"])
    out = Path(settings["out"])
    if out.exists() and not out.is_dir():
        raise JudgekitError(f"--out {out} is a file, not an evaluation directory")
    check_eval_dir(out, eval_fingerprint(run_settings))  # another evaluation there: refused before anything is written
    return EvalJob(settings, points, task, problems, run_settings, judges)


def evaluate(out: str | Path, pair=None, quiet: bool = True, **settings: Any) -> list[dict] | None:
    """One `judgekit eval` run as a call: the settings by their config names (``task=``, ``target=``,
    ``draft=``, ``rule=[...]``, ``lenience=[...]``, ``judge=[dir]``, ``limit=``, ...), checked as a config
    file's are; decodes, records into ``out`` (resumable) and returns the summary rows."""
    job = prepare(None, {**settings, "out": str(out)})
    return run(job, pair=pair, quiet=quiet)


def skip_missing_judges(sweeps: list[dict]) -> list[dict]:
    """For a dry run of a recipe whose judges are not trained yet: drop judge directories that do not exist
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


def run(job: EvalJob, pair=None, quiet: bool = False, rank_env: tuple[int, int, int] | None = None,
        progress_bars: bool | None = None) -> list | None:
    """Decode this rank's share of the job, then (on the last rank to finish) summarise and write summary.md,
    summary.csv and the plots. ``pair``: an already loaded pair matching the settings (the demo's).
    ``progress_bars``: None shows them when stderr is a terminal, True always (unless ``quiet``)."""
    import pyarrow as pa
    import torch

    from judgekit.config import check_positions, loading_options
    from judgekit.dist import DistEnv, distributed_env, rank_device
    from judgekit.evaluate.run import run_eval
    from judgekit.progress import EvalProgress
    from judgekit.evaluate.report import rebuild_outputs
    from judgekit.judge.head import bind_rule
    from judgekit.decode.rules import make_rule
    from judgekit.models import load_model_pair
    from judgekit.store.records import read_records

    s = job.settings
    env = DistEnv(*rank_env) if rank_env else distributed_env()
    rank, world = env.rank, env.world_size
    if s["threads"]:
        torch.set_num_threads(s["threads"])
    if pair is None:
        pair = load_model_pair(s["target"], s["draft"], rank_device(s["device"], env), s["dtype"],
                               **loading_options(s))
    check_positions(pair, s["max_new_tokens"])
    for path, (judge, digest) in list(job.judges.items()):  # a judge for another model fails before any write
        job.judges[path] = (bind_rule(make_rule("judge", judge=judge), pair).judge, digest)
    log(f"rank {rank}/{world}: {len(job.points)} points x {len(job.problems)} problems -> {job.out}")
    counts = run_eval(pair, job.task, job.problems, job.points, job.run_settings, str(job.out), rank=rank,
                      world_size=world, flush_every=s["flush_every"], progress=None if quiet else log,
                      batch_size=s["batch_size"], grade_workers=s["grade_workers"],
                      judges=job.judges, bars=None if quiet else EvalProgress(0, enabled=progress_bars))
    log(f"rank {rank}/{world}: evaluated {counts['evaluated']} (point, problem) pairs, "
        f"{counts['skipped']} already done")
    records = read_records(job.out)
    keys, ids = {p.key for p in job.points}, {p.problem_id for p in job.problems}
    mask = [pt in keys and pr in ids for pt, pr in zip(records.column("point").to_pylist(),
                                                        records.column("problem").to_pylist())]
    records = records.filter(pa.array(mask, type=pa.bool_()))
    if records.num_rows < len(job.points) * len(job.problems):
        # Another rank is still running; the last rank to finish writes the summary.
        log(f"rank {rank}/{world}: {records.num_rows}/{len(job.points) * len(job.problems)} pairs recorded so "
            "far; the summary is written by the last rank to finish")
        return None
    # The summary and plots reflect every record in the directory (a partial rerun extends them).
    rows, written = rebuild_outputs(job.out, s["title"])
    for path in written:
        log(f"wrote {path}")
    return rows
