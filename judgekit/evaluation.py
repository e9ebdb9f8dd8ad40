"""Evaluating verification rules on a task: decoding, grading, per-problem records and summaries.

`evaluate_rule` scores one rule on a list of problems in memory; `Sweep` / `run_eval` / `summarize` are the
machinery of `judgekit eval` (a sweep of rule parameters, temperatures and seeds, recorded per problem in
Parquet via :mod:`judgekit.records`, resumable and sharded across ranks, summarised with 95 % intervals).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from judgekit.decoding import GenerationStats, SamplingConfig, SpeculativeDecoder
from judgekit.errors import JudgekitError
from judgekit.models import ModelPair, encode_prompt
from judgekit.rules import Rule
from judgekit.tasks.base import Problem, Task


@dataclass
class RuleScore:
    rule: str
    problems: int
    correct: int
    stats: GenerationStats

    @property
    def accuracy(self) -> float:
        return self.correct / self.problems if self.problems else 0.0

    def row(self) -> dict:
        return {"rule": self.rule, "problems": self.problems, "accuracy": self.accuracy,
                "block_efficiency": self.stats.block_efficiency, "tokens_per_s": self.stats.tokens_per_s,
                "new_tokens": self.stats.new_tokens}


def evaluate_rule(pair: ModelPair, task: Task, problems: list[Problem], rule: Rule, label: str,
                  sampling: SamplingConfig | None = None, block_size: int = 8, max_new_tokens: int = 256,
                  seed: int = 0, chat_template: bool = True, batch_size: int = 1) -> RuleScore:
    """``batch_size`` > 1 decodes that many problems in lockstep (fast path); problem i is seeded seed + i
    either way, so greedy results do not depend on the batch size."""
    decoder = SpeculativeDecoder(pair, rule, block_size, sampling)
    correct, stats = 0, []
    prompts = [encode_prompt(pair.tokenizer, task.build_prompt(p, pair.tokenizer, chat_template=chat_template))
               for p in problems]
    seeds = [seed + i for i in range(len(problems))]
    if batch_size > 1:
        gens = decoder.generate_batch(prompts, max_new_tokens, task.stop_strings, seeds, batch_size=batch_size)
    else:
        gens = [decoder.generate_ids(ids, max_new_tokens, task.stop_strings, s) for ids, s in zip(prompts, seeds)]
    for problem, gen in zip(problems, gens):
        correct += bool(task.grade(problem, task.extract_outcome(problem, gen.text)))
        stats.append(gen.stats)
    return RuleScore(label, len(problems), correct, GenerationStats.merge(stats))


def format_table(scores: list[RuleScore]) -> str:
    lines = [f"{'rule':<34}{'accuracy':>10}{'BE':>7}{'tokens/s':>10}", "-" * 61]
    lines += [f"{s.rule:<34}{s.accuracy:>10.1%}{s.stats.block_efficiency:>7.2f}{s.stats.tokens_per_s:>10.1f}"
              for s in scores]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------------
# `judgekit eval`: a sweep of (rule, parameters, temperature, block size, seed) points over a task's problems,
# per-problem records on disk (judgekit.records), and a summary with 95 % intervals.

# Sweep keys holding rule parameters, and the rule field each one feeds ("threshold" depends on the rule).
RULE_PARAM_KEYS = ("lenience", "lam", "fuzzy_threshold", "divergence", "judge_threshold", "p_base", "epsilon",
                   "delta")
_FIELD_KEY = {"threshold": {"fuzzy": "fuzzy_threshold", "judge": "judge_threshold"}}


def rule_param_fields(rule: str) -> list[str]:
    """The rule's numeric/string parameters (dataclass fields, without the judge object)."""
    import dataclasses

    from judgekit.rules import RULES

    cls = RULES[rule]
    if not dataclasses.is_dataclass(cls):
        return []
    return [f.name for f in dataclasses.fields(cls) if f.name != "judge"]


def _sweep_key(rule: str, field_name: str) -> str:
    return _FIELD_KEY.get(field_name, {}).get(rule, field_name)


def resolve_threshold(judge, value: float | str) -> float:
    """A judge threshold given as a number, or by the name of one saved in the judge's config (p20, recall90)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    saved = (judge.config if hasattr(judge, "config") else judge).get("thresholds") or {}
    if value not in saved:
        names = ", ".join(sorted(saved)) or "none"
        raise JudgekitError(f"judge threshold {value!r} is not saved in the judge (saved: {names})")
    return float(saved[value])


def _judge_digest(path: str) -> str:
    import hashlib
    from pathlib import Path

    from judgekit.judge import WEIGHTS_NAME

    return hashlib.sha1((Path(path) / WEIGHTS_NAME).read_bytes()).hexdigest()[:12]


def _judge_config(path: str) -> dict:
    from judgekit.judge import load_judge

    return load_judge(path).config


@dataclass
class EvalPoint:
    """One point of a sweep: a rule with its parameters, decoded at one temperature, block size and seed."""

    rule: str
    params: dict  # JSON-serialisable (a judge is its directory path)
    temperature: float
    block_size: int
    seed: int
    label: str = ""

    def _key(self, with_seed: bool) -> str:
        import hashlib
        import json

        d = {"rule": self.rule, "params": self.params, "temperature": self.temperature,
             "block_size": self.block_size, **({"seed": self.seed} if with_seed else {})}
        return hashlib.sha1(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def key(self) -> str:
        return self._key(True)

    @property
    def config_key(self) -> str:
        return self._key(False)


def _fmt(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def point_label(rule: str, params: dict) -> str:
    from pathlib import Path

    parts = []
    for k, v in params.items():
        if k == "judge":
            parts.insert(0, Path(v).name)
        elif k in ("threshold_name", "judge_sha"):
            continue
        elif k == "threshold" and "threshold_name" in params:
            parts.append(f"t={params['threshold_name']}({v:.3g})")
        else:
            parts.append(f"{k}={_fmt(v)}")
    return " ".join([rule, *parts])


@dataclass
class Sweep:
    """What to evaluate: rules, lists of parameter values (every combination a rule uses), judges, decoding."""

    rules: list[str]
    values: dict = field(default_factory=dict)  # RULE_PARAM_KEYS -> list of values
    judges: list[str] = field(default_factory=list)
    temperatures: list[float] = field(default_factory=lambda: [0.0])
    block_sizes: list[int] = field(default_factory=lambda: [8])
    seeds: list[int] = field(default_factory=lambda: [0])

    def points(self) -> list[EvalPoint]:
        import itertools

        from judgekit.rules import RULES

        out: list[EvalPoint] = []
        for rule in self.rules:
            if rule not in RULES:
                raise JudgekitError(f"unknown rule {rule!r}; choose from {', '.join(RULES)}")
            names = rule_param_fields(rule)
            lists = [[(n, v) for v in self.values.get(_sweep_key(rule, n), [])] for n in names]
            lists = [opts for opts in lists if opts]  # a parameter without values keeps the rule's default
            combos = [dict(c) for c in itertools.product(*lists)]
            if rule == "judge":
                if not self.judges:
                    raise JudgekitError("rule judge needs --judge DIR (one or more trained judge directories)")
                combos = [self._judge_params(j, c) for j in self.judges for c in combos]
            for params in combos:
                self._check(rule, params)
                for temp in self.temperatures:
                    # Greedy decoding does not depend on the seed: one seed is enough.
                    for seed in (self.seeds[:1] if temp == 0 else self.seeds):
                        for gamma in self.block_sizes:
                            out.append(EvalPoint(rule, params, float(temp), int(gamma), int(seed),
                                                 point_label(rule, params)))
        unique = {p.key: p for p in out}
        return list(unique.values())

    @staticmethod
    def _judge_params(path: str, combo: dict) -> dict:
        config = _judge_config(path)  # loads and checks the judge: a missing or corrupt one fails clearly here
        # The weights' digest is part of the point: a judge retrained in place is a new point, never resumed.
        params = {"judge": str(path), "judge_sha": _judge_digest(path)}
        spec = combo.get("threshold", 0.5)
        params["threshold"] = resolve_threshold(config, spec)
        if isinstance(spec, str):
            params["threshold_name"] = spec
        return {**{k: v for k, v in combo.items() if k != "threshold"}, **params}

    @staticmethod
    def _check(rule: str, params: dict) -> None:
        """Build the rule once (with a stand-in judge) so a bad parameter fails before any model loads."""
        from judgekit.rules import make_rule

        p = {k: v for k, v in params.items() if k not in ("threshold_name", "judge_sha")}
        if rule == "judge":
            p["judge"] = lambda h, t: h
        make_rule(rule, **p)


@dataclass(frozen=True)
class EvalSettings:
    """What every point of an evaluation directory shares; a rerun must agree on it (except limit)."""

    task: str
    target: str
    draft: str
    split: str = "test"
    data_file: str | None = None
    limit: int | None = None
    max_new_tokens: int = 256
    top_k: int | None = None
    top_p: float | None = None
    chat_template: bool = True

    def to_dict(self) -> dict:
        import dataclasses

        return dataclasses.asdict(self)


def problem_seed(seed: int, problem_id: str) -> int:
    """Per-problem sampling seed, stable when --limit or the sharding changes."""
    import zlib

    return (seed * 1_000_003 + zlib.crc32(problem_id.encode())) % (2 ** 62)


def _build_rule(point: EvalPoint, pair: ModelPair, judges: dict) -> Rule:
    """The point's rule; a judge is loaded once per directory, then checked against the pair and placed."""
    from judgekit.judge import bind_rule, load_judge
    from judgekit.rules import make_rule

    params = {k: v for k, v in point.params.items() if k not in ("threshold_name", "judge_sha")}
    if point.rule == "judge":
        path = params["judge"]
        if path not in judges:
            judges[path] = load_judge(path)
        params["judge"] = judges[path]
    return bind_rule(make_rule(point.rule, **params), pair)


def point_record(task: Task, problem: Problem, point: EvalPoint, gen) -> dict:
    """Grade one decoded problem at one sweep point: one record (judgekit.records.RECORD_SCHEMA)."""
    import json

    outcome = task.extract_outcome(problem, gen.text)
    s = gen.stats
    return {"point": point.key, "config": point.config_key, "label": point.label, "rule": point.rule,
            "params": json.dumps(point.params, sort_keys=True), "temperature": point.temperature,
            "block_size": point.block_size, "seed": point.seed, "problem": problem.problem_id,
            "completion_ids": gen.token_ids, "text": gen.text, "finish_reason": gen.finish_reason,
            "outcome": json.dumps(outcome, default=str), "correct": bool(task.grade(problem, outcome)),
            "new_tokens": s.new_tokens, "target_calls": s.target_calls, "draft_calls": s.draft_calls,
            "accept_hist": s.accept_hist, "wall_time": s.wall_time}


class _Grading:
    """Records being graded on worker threads; committed every ``flush_every`` of them as they are ready."""

    def __init__(self, writer, flush_every: int):
        self.writer, self.flush_every = writer, flush_every
        self.pending: list = []  # futures of records not yet written
        self.correct = 0

    def add(self, future) -> None:
        self.pending.append(future)
        self.commit(wait_all=False)

    def commit(self, wait_all: bool) -> None:
        """Write the graded records once flush_every are ready (all of them, waiting, with ``wait_all``)."""
        ready = list(self.pending) if wait_all else [f for f in self.pending if f.done()]
        if len(ready) >= self.flush_every or (wait_all and ready):
            rows = [f.result() for f in ready]
            self.writer.write(rows)
            self.correct += sum(r["correct"] for r in rows)
            self.pending = [f for f in self.pending if f not in ready]


def run_eval(pair: ModelPair, task: Task, problems: list[Problem], points: list[EvalPoint],
             settings: EvalSettings, out_dir: str, rank: int = 0, world_size: int = 1, flush_every: int = 16,
             progress=None, batch_size: int = 1, grade_workers: int = 4) -> dict:
    """Evaluate this rank's share of the (point, problem) pairs not yet in out_dir; returns counts.

    Pairs are enumerated point-major and dealt round-robin to ranks, so each rank holds a slice of every point
    and the ranks finish together. `progress(message)` is called after each point this rank works on.
    ``batch_size`` > 1 decodes up to that many problems of a point in lockstep on the fast path, a finished
    problem's place taken by the next (continuous batching); records are committed every ``flush_every``
    finished problems. Every problem keeps its own seed, so greedy records do not depend on the batch size
    (tested). Grading (for code: sandboxed test runs) happens on ``grade_workers`` threads while decoding goes on.
    """
    import time as _time
    from concurrent.futures import ThreadPoolExecutor

    from judgekit.records import RecordWriter

    if batch_size < 1 or grade_workers < 1:
        raise JudgekitError(f"batch size and grading workers must be >= 1, got {batch_size}, {grade_workers}")
    writer = RecordWriter(out_dir, settings.to_dict(), rank)
    done = writer.done()
    pairs = [(pi, qi) for pi in range(len(points)) for qi in range(len(problems))]
    mine = [(pi, qi) for i, (pi, qi) in enumerate(pairs) if i % world_size == rank]
    todo = [(pi, qi) for pi, qi in mine if (points[pi].key, problems[qi].problem_id) not in done]
    prompts: dict[int, list[int]] = {}
    judges: dict = {}
    by_point: dict[int, list[int]] = {}
    for pi, qi in todo:
        by_point.setdefault(pi, []).append(qi)
    with ThreadPoolExecutor(max_workers=grade_workers, thread_name_prefix="judgekit-grade") as pool:
        for n_point, (pi, qis) in enumerate(by_point.items(), 1):
            point = points[pi]
            sampling = SamplingConfig(point.temperature, settings.top_k, settings.top_p)
            decoder = SpeculativeDecoder(pair, _build_rule(point, pair, judges), point.block_size, sampling)
            start = _time.perf_counter()
            for qi in qis:
                if qi not in prompts:
                    prompts[qi] = encode_prompt(pair.tokenizer, task.build_prompt(
                        problems[qi], pair.tokenizer, chat_template=settings.chat_template))
            grading = _Grading(writer, flush_every)
            seeds = [problem_seed(point.seed, problems[qi].problem_id) for qi in qis]
            # All of the point's problems in one call: finished rows are refilled (continuous batching), and
            # each finished problem is graded on the pool while the rest decode.
            decoder.generate_batch(
                [prompts[qi] for qi in qis], settings.max_new_tokens, task.stop_strings, seeds,
                batch_size=batch_size,
                on_finish=lambda i, gen: grading.add(pool.submit(point_record, task, problems[qis[i]], point, gen)))
            grading.commit(wait_all=True)
            if progress:
                progress(f"[{n_point}/{len(by_point)}] {point.label} T={point.temperature:g} "
                         f"gamma={point.block_size} seed={point.seed}: {grading.correct}/{len(qis)} correct "
                         f"({_time.perf_counter() - start:.1f}s)")
    return {"pairs": len(pairs), "mine": len(mine), "evaluated": len(todo), "skipped": len(mine) - len(todo)}


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95 % Wilson score interval of a proportion (well-behaved at 0 and n, unlike the normal interval)."""
    if n == 0:
        return 0.0, 1.0
    phat = k / n
    den = 1 + z * z / n
    centre = (phat + z * z / (2 * n)) / den
    half = z * ((phat * (1 - phat) / n + z * z / (4 * n * n)) ** 0.5) / den
    # The interval always contains phat; clamping keeps rounding from putting an end on the wrong side of it.
    return max(0.0, min(phat, centre - half)), min(1.0, max(phat, centre + half))


# Table order: collaborative rules, then each truncation rule followed by its matched baseline; rules not
# listed (e.g. added later) follow in registry order.
SUMMARY_ORDER = ("lossless", "lenience", "cos", "cos-adaptive", "cos-ceiling", "fuzzy", "judge", "speccascade",
                 "minp", "typical", "eta")


def summarize(records) -> list[dict]:
    """One row per sweep point (seeds pooled): quality with its Wilson interval over the records, block
    efficiency = emitted tokens / target calls summed over the records, tokens/s = tokens / decoding time.

    Rows are ordered by temperature, block size, rule (SUMMARY_ORDER: each truncation rule next to its
    matched baseline), then parameters.
    """
    import json

    from judgekit.rules import RULES

    groups: dict[str, dict] = {}
    for r in records.to_pylist() if hasattr(records, "to_pylist") else records:
        g = groups.setdefault(r["config"], {
            "label": r["label"], "rule": r["rule"], "params": json.loads(r["params"]),
            "temperature": r["temperature"], "block_size": r["block_size"], "seeds": set(), "problems": set(),
            "n": 0, "correct": 0, "new_tokens": 0, "target_calls": 0, "draft_calls": 0, "wall_time": 0.0,
            "accept_hist": []})
        g["seeds"].add(r["seed"])
        g["problems"].add(r["problem"])
        g["n"] += 1
        g["correct"] += int(r["correct"])
        for k in ("new_tokens", "target_calls", "draft_calls", "wall_time"):
            g[k] += r[k]
        hist = g["accept_hist"]
        hist.extend([0] * (len(r["accept_hist"]) - len(hist)))
        for i, c in enumerate(r["accept_hist"]):
            hist[i] += c
    order = {name: i for i, name in enumerate([*SUMMARY_ORDER, *RULES])}
    rows = []
    for g in groups.values():
        lo, hi = wilson(g["correct"], g["n"])
        rows.append({**g, "seeds": sorted(g["seeds"]), "problems": len(g["problems"]),
                     "quality": g["correct"] / g["n"] if g["n"] else 0.0, "quality_ci": [lo, hi],
                     "block_efficiency": g["new_tokens"] / g["target_calls"] if g["target_calls"] else 0.0,
                     "tokens_per_s": g["new_tokens"] / g["wall_time"] if g["wall_time"] > 0 else 0.0})
    rows.sort(key=lambda r: (r["temperature"], r["block_size"], order.get(r["rule"], len(order)),
                             json.dumps(r["params"], sort_keys=True)))
    _add_lossless_ratios(rows)
    return rows


def _add_lossless_ratios(rows: list[dict]) -> None:
    """BE relative to the lossless point decoded at the same temperature and block size (when present)."""
    base = {(r["temperature"], r["block_size"]): r for r in rows if r["rule"] == "lossless"}
    for r in rows:
        b = base.get((r["temperature"], r["block_size"]))
        r["be_vs_lossless"] = (r["block_efficiency"] / b["block_efficiency"]
                               if b and b["block_efficiency"] else None)
        r["quality_vs_lossless"] = r["quality"] - b["quality"] if b else None


CSV_COLUMNS = ("label", "rule", "params", "temperature", "block_size", "seeds", "n", "problems", "correct",
               "quality", "quality_lo", "quality_hi", "block_efficiency", "be_vs_lossless", "tokens_per_s",
               "new_tokens", "target_calls", "draft_calls", "wall_time")


def summary_csv(rows: list[dict]) -> str:
    import csv
    import io
    import json

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for r in rows:
        flat = {**r, "params": json.dumps(r["params"], sort_keys=True), "seeds": " ".join(map(str, r["seeds"])),
                "quality_lo": r["quality_ci"][0], "quality_hi": r["quality_ci"][1]}
        w.writerow(["" if flat[c] is None else flat[c] for c in CSV_COLUMNS])
    return buf.getvalue()


def summary_markdown(rows: list[dict], title: str = "") -> str:
    lines = [f"## {title}", ""] if title else []
    lines += ["| rule | T | γ | n | quality [95 % CI] | Δ vs lossless | BE | BE / lossless | tokens/s |",
              "|---|---:|---:|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        lo, hi = r["quality_ci"]
        dq = "" if r["quality_vs_lossless"] is None else f"{100 * r['quality_vs_lossless']:+.1f}"
        ratio = "" if r["be_vs_lossless"] is None else f"{r['be_vs_lossless']:.2f}×"
        lines.append(f"| {r['label']} | {r['temperature']:g} | {r['block_size']} | {r['n']} | "
                     f"{100 * r['quality']:.1f} [{100 * lo:.1f}, {100 * hi:.1f}] | {dq} | "
                     f"{r['block_efficiency']:.2f} | {ratio} | {r['tokens_per_s']:.0f} |")
    return "\n".join(lines) + "\n"


def json_rows(rows: list[dict]) -> list[dict]:
    """The rows `judgekit eval --json` prints (no sets, no per-step histograms)."""
    keys = ("label", "rule", "params", "temperature", "block_size", "seeds", "n", "problems", "correct",
            "quality", "quality_ci", "block_efficiency", "be_vs_lossless", "quality_vs_lossless",
            "tokens_per_s", "new_tokens", "target_calls", "draft_calls", "wall_time", "accept_hist")
    return [{k: r[k] for k in keys} for r in rows]
