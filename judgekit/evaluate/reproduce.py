"""`judgekit reproduce`: the paper's experiments on the pocket world, stage by stage, and a findings table.

Stages (each in its own directory under `out`, each resumed by a rerun): mine the judges' training problems
(`mine_to_dir`), train one judge per math:code mix (`judge.train.train_one`), evaluate every task's sweep
(`run_eval`, records in Parquet), Lemma 1 on synthetic pairs (`analysis.lemma1_sweep`), then findings.md:
one row per paper finding with its measured paired difference, 95 % interval and a verdict computed from
the interval alone (`verdict`). The settings are judgekit/configs/reproduce.toml.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from judgekit.errors import JudgekitError

CONFIG = Path(__file__).resolve().parent.parent / "configs" / "reproduce.toml"
REPRODUCED, CONTRADICTED, NOT_SHOWN, NOT_MEASURED = "reproduced", "contradicted", "not shown", "not measured"


# ---- settings --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TaskRun:
    """One evaluated task and the pair it is decoded with."""

    name: str
    target: str
    draft: str
    max_new_tokens: int = 160
    judges: bool = True


@dataclass(frozen=True)
class ReproduceSettings:
    problems: int = 300
    mine_problems: int = 200
    mine_tasks: tuple[str, ...] = ("pocket-math", "pocket-code")
    mixes: tuple[str, ...] = ("9:1", "1:9")
    judge_epochs: int = 30
    batch_size: int = 16
    tasks: tuple[TaskRun, ...] = ()
    sweeps: tuple[dict, ...] = ()
    analyze: dict = field(default_factory=dict)


def load_settings(path: str | Path = CONFIG) -> ReproduceSettings:
    """The recipe's TOML: scale, tasks with their pairs, the eval sweeps and the Lemma 1 grid."""
    import tomllib

    path = Path(path)
    if not path.is_file():
        raise JudgekitError(f"reproduce config {path} does not exist")
    try:
        data = tomllib.loads(path.read_text())
        tasks = tuple(TaskRun(**t) for t in data.pop("task", []))
        sweeps = tuple(data.pop("sweep", []))
        settings = ReproduceSettings(tasks=tasks, sweeps=sweeps, analyze=data.pop("analyze", {}),
                                     **{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})
    except (TypeError, tomllib.TOMLDecodeError) as err:
        raise JudgekitError(f"reproduce config {path}: {err}") from None
    if not tasks or not sweeps:
        raise JudgekitError(f"reproduce config {path}: needs [[task]] and [[sweep]] tables")
    return settings


def quick(settings: ReproduceSettings, problems: int = 3) -> ReproduceSettings:
    """A few problems everywhere (tests, a smoke run): the same stages and findings, no meaningful numbers."""
    return replace(settings, problems=problems, mine_problems=max(4, problems), judge_epochs=2, batch_size=4,
                   tasks=tuple(replace(t, max_new_tokens=min(t.max_new_tokens, 48)) for t in settings.tasks),
                   analyze={**settings.analyze, "pairs": 32})


# ---- the paired difference and the verdict ---------------------------------------------------------------
def paired_difference(a: dict[str, list[float]], b: dict[str, list[float]]) -> dict:
    """Mean over problems of (mean correctness of side a - of side b), with the summaries' 95 % interval.

    `a` and `b` map a problem id to its 0/1 outcomes on that side (several points or seeds pooled per
    problem); only problems present on both sides count, so the difference is paired, and the interval is
    judgekit.evaluate.summary's bootstrap over problems (a problem's outcomes resampled together, Hesterberg's
    expanded percentiles) — the same statistics every summary prints."""
    import numpy as np

    from judgekit.evaluate.summary import bootstrap_weights, ratio_interval

    ids = sorted(set(a) & set(b))
    if not ids:
        return {"n": 0, "diff": None, "lo": None, "hi": None}
    d = np.array([sum(a[i]) / len(a[i]) - sum(b[i]) / len(b[i]) for i in ids])
    ones = np.ones(len(d))
    lo, hi = ratio_interval(d, ones, bootstrap_weights(len(d)))
    return {"n": len(d), "diff": float(d.mean()), "lo": lo, "hi": hi}


def verdict(lo: float | None, hi: float | None, direction: int) -> str:
    """From the interval alone: the paper's sign (direction +1: a > b, -1: a < b) excluded-zero-wise."""
    if lo is None or hi is None or math.isnan(lo) or math.isnan(hi):
        return NOT_MEASURED
    if (direction > 0 and lo > 0) or (direction < 0 and hi < 0):
        return REPRODUCED
    if (direction > 0 and hi < 0) or (direction < 0 and lo > 0):
        return CONTRADICTED
    return NOT_SHOWN


# ---- the findings --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Side:
    """Which records one side of a comparison pools: a rule at a temperature on a draft shape (a chain, or the
    tree spec the records name), params that must match."""

    rule: str
    temperature: float
    params: tuple[tuple[str, Any], ...] = ()
    judge: str | None = None  # a judge's mix, e.g. "9:1" (its directory name)
    tree: str | None = None  # None: chain records only

    def matches(self, record: dict) -> bool:
        if record["rule"] != self.rule or abs(record["temperature"] - self.temperature) > 1e-9:
            return False
        if record.get("tree") != self.tree:
            return False
        params = json.loads(record["params"])
        if self.judge is not None and Path(params.get("judge", "")).name != judge_dir_name(self.judge):
            return False
        return all(params.get(k) == v for k, v in self.params)

    def describe(self) -> str:
        bits = [f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in self.params]
        return " ".join([self.rule, *([self.judge] if self.judge else []), *bits, f"T={self.temperature:g}",
                         *([f"tree {self.tree}"] if self.tree else [])])


@dataclass(frozen=True)
class Finding:
    """A paper finding as a paired comparison: quality(a) - quality(b) has the paper's sign `direction`."""

    key: str
    source: str  # where in the paper
    claim: str
    a: Side
    b: Side
    direction: int
    tasks: tuple[str, ...] | None = None  # None: every evaluated task that has both sides


# The tree of Table 3's findings; judgekit/configs/reproduce.toml's tree sweep must name the same spec.
TABLE3_TREE = "2,2,1,1:topk"


def judge_dir_name(mix: str) -> str:
    return "judge-" + mix.replace(":", "to")


FINDINGS: tuple[Finding, ...] = (
    Finding("fig4-cos", "Figure 4", "CoS at an aggressive λ loses quality vs lossless (greedy)",
            Side("cos", 0.0, (("lam", 0.2),)), Side("lossless", 0.0), -1),
    Finding("fig4-lenience", "Figure 4", "lenience keeps quality above aggressive CoS (greedy)",
            Side("lenience", 0.0, (("lenience", 0.3),)), Side("cos", 0.0, (("lam", 0.2),)), +1),
    Finding("fig4-judge", "Figure 4", "the judge at a loose threshold (p80) loses quality vs lossless (greedy)",
            Side("judge", 0.0, (("threshold_name", "p80"),), judge="9:1"), Side("lossless", 0.0), -1),
    Finding("tab1-adaptive", "Table 1", "cos-adaptive (no ceiling) loses quality vs lossless (T=1)",
            Side("cos-adaptive", 1.0, (("lam", 0.2),)), Side("lossless", 1.0), -1),
    Finding("tab1-ceiling", "Table 1", "cos-ceiling keeps more quality than cos-adaptive (T=1)",
            Side("cos-ceiling", 1.0, (("lam", 0.2),)), Side("cos-adaptive", 1.0, (("lam", 0.2),)), +1),
    Finding("tab2-mix", "Table 2", "the 9:1 (math-heavy) judge beats the 1:9 one, thresholds pooled (greedy)",
            Side("judge", 0.0, judge="9:1"), Side("judge", 0.0, judge="1:9"), +1),
    Finding("fig6-minp", "Figure 6", "SpecCascade below min-p, p_base pooled (T=1)",
            Side("speccascade", 1.0), Side("minp", 1.0), -1),
    Finding("fig6-eta", "Figure 6", "typical acceptance below η-sampling (T=1)",
            Side("typical", 1.0), Side("eta", 1.0), -1),
    # Table 3: the same pairs on an EAGLE-style tree (top-m siblings under sampling, Theorem 1's KL_EAGLE)
    Finding("tab3-minp", "Table 3", "SpecCascade below min-p on a top-k tree (T=1)",
            Side("speccascade", 1.0, tree=TABLE3_TREE), Side("minp", 1.0, tree=TABLE3_TREE), -1),
    Finding("tab3-eta", "Table 3", "typical acceptance below η-sampling on a top-k tree (T=1)",
            Side("typical", 1.0, tree=TABLE3_TREE), Side("eta", 1.0, tree=TABLE3_TREE), -1),
)


def outcomes(records: list[dict], side: Side) -> dict[str, list[float]]:
    """problem id -> the 0/1 outcomes of every record on that side."""
    out: dict[str, list[float]] = {}
    for r in records:
        if side.matches(r):
            out.setdefault(r["problem"], []).append(float(bool(r["correct"])))
    return out


def finding_rows(records_by_task: dict[str, list[dict]], findings=FINDINGS) -> list[dict]:
    """One row per (finding, task) where the task's records hold both sides; a side with no records is
    reported as not measured."""
    rows = []
    for f in findings:
        for task, records in records_by_task.items():
            if f.tasks is not None and task not in f.tasks:
                continue
            a, b = outcomes(records, f.a), outcomes(records, f.b)
            if not a and not b:
                continue
            stat = paired_difference(a, b)
            rows.append({"key": f.key, "source": f.source, "claim": f.claim, "task": task,
                         "a": f.a.describe(), "b": f.b.describe(), "direction": f.direction, **stat,
                         "verdict": verdict(stat["lo"], stat["hi"], f.direction)})
    return rows


def lemma1_rows(lemma: list[dict]) -> list[dict]:
    """Figure 5's findings from Lemma 1's terms: η-sampling's ΔBE > 0 for every pair at every ε ("uniformly",
    so the test is the worst setting's 10 % quantile over the pairs), and min-p's ΔBE > 0 at its smallest
    p_base, where the paper finds the gain dominating. Per-pair 10-90 % bands, not paired intervals: these
    claims are about every distribution pair, not a mean."""
    rows = []
    eta = [r for r in lemma if r["truncation"] == "eta"]
    minp = [r for r in lemma if r["truncation"] == "minp"]
    small = min((r["value"] for r in minp), default=None)
    for key, claim, sel in (("fig5-eta", "η-sampling: ΔBE > 0 uniformly across pairs and ε", eta),
                            ("fig5-minp", f"min-p: ΔBE > 0 at the smallest p_base ({small})",
                             [r for r in minp if r["value"] == small])):
        if not sel:
            continue
        worst = min(sel, key=lambda r: r["delta_be_q10"])
        rows.append({"key": key, "source": "Figure 5", "claim": claim, "task": "synthetic",
                     "a": f"ΔBE at {worst['param']}={worst['value']:g} ({worst['source']})", "b": "0",
                     "direction": +1, "n": worst["n"], "diff": worst["delta_be"], "lo": worst["delta_be_q10"],
                     "hi": worst["delta_be_q90"], "verdict": verdict(worst["delta_be_q10"], worst["delta_be_q90"], +1)})
    return rows


def findings_markdown(rows: list[dict], header: str = "") -> str:
    lines = [header, ""] if header else []
    lines += ["| finding | paper | task | a − b | n | a − b (points) [95 % CI] | verdict |",
              "|---|---|---|---|---:|---|---|"]
    for r in rows:
        scale = 1 if r["task"] == "synthetic" else 100
        fmt = (lambda v: f"{v:.3f}") if scale == 1 else (lambda v: f"{100 * v:+.1f}")
        cell = "—" if r["diff"] is None else f"{fmt(r['diff'])} [{fmt(r['lo'])}, {fmt(r['hi'])}]"
        cell += " (10-90 % band)" if scale == 1 else ""
        lines.append(f"| {r['claim']} | {r['source']} | {r['task']} | {r['a']} − {r['b']} | {r['n']} | {cell} | "
                     f"**{r['verdict']}** |")
    return "\n".join(lines) + "\n"


# ---- the stages ----------------------------------------------------------------------------------------
def _sweep_points(sweeps: tuple[dict, ...], judges: list[str]):
    """EvalPoints of the config's sweeps (eval's config vocabulary); judge rules dropped without judges."""
    from judgekit.decode.params import param_keys
    from judgekit.evaluate.sweep import Sweep

    points = []
    aliases = {"rules": "rule", "seeds": "seeds", "judge_threshold": "judge_threshold"}
    for raw in sweeps:
        s = {aliases.get(k, k): v for k, v in raw.items()}
        rules = [r for r in s["rule"] if r != "judge" or judges]
        if not rules:
            continue
        values = {k: list(s[k]) for k in param_keys() if k in s}
        trees = s.get("tree", ["chain"])
        sweep = Sweep(rules=rules, values=values, judges=judges if "judge" in rules else [],
                      temperatures=[float(s.get("temperature", 0.0))], block_sizes=[int(s.get("block_size", 8))],
                      seeds=[int(x) for x in s.get("seeds", [0])],
                      trees=[str(t) for t in (trees if isinstance(trees, list) else [trees])])
        points.extend(sweep.points())
    return list({p.key: p for p in points}.values())


def mine_stage(settings: ReproduceSettings, out: Path, log: Callable[[str], None]) -> list[str]:
    from judgekit.mine.miner import MineConfig, mine_to_dir
    from judgekit.models import load_model_pair
    from judgekit.store.stats import dir_stats
    from judgekit.tasks import get_task

    first = next(t for t in settings.tasks if t.judges)
    pair = load_model_pair(first.target, first.draft, "cpu", "auto")
    dirs = []
    for name in settings.mine_tasks:
        task = get_task(name)
        run = next((t for t in settings.tasks if t.name == name), first)
        target_dir = out / "mined" / name
        mine_to_dir(pair, task, task.load("train", limit=settings.mine_problems), str(target_dir),
                    MineConfig(max_new_tokens=run.max_new_tokens), split="train", limit=settings.mine_problems,
                    resume=True, flush_every=4, progress=False)
        s = dir_stats(target_dir)
        log(f"mined {name}: {s['problems']} problems, {s['mismatches']} mismatches, {s['important']} important")
        dirs.append(str(target_dir))
    return dirs


def judge_stage(settings: ReproduceSettings, mined: list[str], out: Path, log: Callable[[str], None]) -> list[str]:
    """One judge per mix; a judge already saved is kept (resume); one that cannot be trained is reported."""
    from judgekit.judge import data as jd
    from judgekit.judge import train as tj

    judges = []
    for mix in settings.mixes:
        judge_dir = out / "judges" / judge_dir_name(mix)
        if not (judge_dir / "judge_config.json").exists():
            try:
                sources, split, spec = jd.prepare(mined)
                sel = jd.select(sources, split, mix, jd.parse_mix(mix, len(sources)), None, "problems")
                cfg = tj.TrainConfig(max_epochs=settings.judge_epochs, accelerator="cpu", devices=1,
                                     progress=False)
                tj.train_one(jd.build_data(sources, sel, spec), cfg, judge_dir, echo=lambda m: None)
            except JudgekitError as err:
                log(f"the {mix} judge was not trained ({err}); its findings are not measured")
                continue
        judges.append(str(judge_dir))
    return judges


def eval_stage(settings: ReproduceSettings, run: TaskRun, judges: list[str], out: Path,
               log: Callable[[str], None]) -> list[dict]:
    """Decode the task's sweep (resuming its directory), write its summary and plots; returns its records."""
    from judgekit.evaluate.plots import plot_tradeoff, plot_truncation
    from judgekit.evaluate.run import run_eval
    from judgekit.evaluate.summary import summarize, summary_markdown
    from judgekit.evaluate.sweep import EvalSettings
    from judgekit.models import load_model_pair
    from judgekit.store.atomic import atomic_write_bytes
    from judgekit.store.records import read_records
    from judgekit.tasks import get_task

    task = get_task(run.name)
    problems = task.load("test", limit=settings.problems)
    points = _sweep_points(settings.sweeps, judges if run.judges else [])
    eval_dir = out / "eval" / run.name
    pair = load_model_pair(run.target, run.draft, "cpu", "auto")
    es = EvalSettings(run.name, run.target, run.draft, "test", None, settings.problems, run.max_new_tokens)
    counts = run_eval(pair, task, problems, points, es, str(eval_dir), batch_size=settings.batch_size)
    log(f"{run.name}: {counts['evaluated']} decodings, {counts['skipped']} resumed")
    keys, ids = {p.key for p in points}, {p.problem_id for p in problems}
    records = [r for r in read_records(eval_dir).to_pylist() if r["point"] in keys and r["problem"] in ids]
    rows = summarize(records)
    title = f"{run.name} ({run.target} / {run.draft}, {len(problems)} problems)"
    atomic_write_bytes(eval_dir / "summary.md", summary_markdown(rows, title).encode(), 0)
    plot_tradeoff(rows, eval_dir / "be_quality.png", title)
    plot_truncation(rows, eval_dir / "truncation.png", title)
    return records


def analyze_stage(settings: ReproduceSettings, out: Path) -> list[dict]:
    """Lemma 1's terms on synthetic pairs (Figure 5's numbers), cached as analyze/lemma1.json."""
    from judgekit.evaluate import analysis
    from judgekit.store.atomic import atomic_write_bytes

    path = out / "analyze" / "lemma1.json"
    a = settings.analyze
    if path.exists():
        cached = json.loads(path.read_text())
        if cached.get("settings") == a:
            return cached["rows"]
    rows = []
    for noise in a.get("noise", [1.0]):
        pairs = analysis.synthetic_pairs(a.get("family", "zipf"), int(a.get("pairs", 2000)),
                                         int(a.get("vocab", 256)), float(noise))
        rows += analysis.lemma1_sweep(pairs, list(a.get("p_base", [0.1, 0.5, 0.9])),
                                      list(a.get("epsilon", [0.001, 0.01])))
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, json.dumps({"settings": a, "rows": rows}, indent=1).encode())
    return rows


def reproduce(out: str | Path, settings: ReproduceSettings, log: Callable[[str], None] = print) -> dict:
    """Every stage in order, each resumed from its directory; writes findings.md and findings.json."""
    from judgekit.store.atomic import atomic_write_bytes

    if settings.problems < 1 or settings.mine_problems < 1:
        raise JudgekitError("--problems and mine_problems must be >= 1")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    needs_judges = any(t.judges for t in settings.tasks)
    mined = mine_stage(settings, out, log) if needs_judges else []
    judges = judge_stage(settings, mined, out, log) if needs_judges else []
    records, skipped = {}, {}
    for run in settings.tasks:
        try:
            records[run.name] = eval_stage(settings, run, judges, out, log)
        except JudgekitError as err:  # e.g. a pair that is not trained here: the task's findings are not measured
            skipped[run.name] = str(err)
            log(f"{run.name}: not evaluated ({err})")
    lemma = analyze_stage(settings, out)
    rows = finding_rows(records) + lemma1_rows(lemma)
    wall = time.perf_counter() - start
    header = (f"## Findings on the pocket world ({settings.problems} held-out problems per task; "
              f"verdicts from the 95 % paired intervals; this run {wall:.0f} s)")
    notes = "".join(f"\n- {name}: not measured — {why}" for name, why in skipped.items())
    atomic_write_bytes(out / "findings.md", (findings_markdown(rows, header) + notes + ("\n" if notes else "")).encode())
    atomic_write_bytes(out / "findings.json", json.dumps({"wall_seconds": wall, "rows": rows, "skipped": skipped},
                                                         indent=1).encode())
    log(f"findings -> {out / 'findings.md'} ({wall:.0f} s)")
    return {"rows": rows, "wall_seconds": wall, "judges": judges}
