"""Evaluating verification rules on a task: decoding, grading, per-problem records and summaries.

`evaluate_rule` scores one rule on a list of problems in memory; `Sweep` / `run_eval` / `summarize` are the
machinery of `judgekit eval` (a sweep of rule parameters, temperatures and seeds, recorded per problem in
Parquet via :mod:`judgekit.store.records`, resumable and sharded across ranks, summarised with 95 % intervals).
"""

from __future__ import annotations

from dataclasses import dataclass

from judgekit.decode.decoder import SpeculativeDecoder
from judgekit.decode.generation import GenerationStats
from judgekit.decode.sampling import SamplingConfig
from judgekit.errors import JudgekitError
from judgekit.evaluate.sweep import EvalPoint, EvalSettings
from judgekit.models import ModelPair, encode_prompt
from judgekit.decode.rules import Rule
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


def problem_seed(seed: int, problem_id: str) -> int:
    """Per-problem sampling seed, stable when --limit or the sharding changes."""
    import zlib

    return (seed * 1_000_003 + zlib.crc32(problem_id.encode())) % (2 ** 62)


def _build_rule(point: EvalPoint, pair: ModelPair, judges: dict) -> Rule:
    """The point's rule; a judge is loaded once per directory, then checked against the pair and placed."""
    from judgekit.judge.head import bind_rule, load_judge
    from judgekit.decode.rules import make_rule

    params = {k: v for k, v in point.params.items() if k not in ("threshold_name", "judge_sha")}
    if point.rule == "judge":
        path = params["judge"]
        if path not in judges:
            judges[path] = load_judge(path)
        params["judge"] = judges[path]
    return bind_rule(make_rule(point.rule, **params), pair)


def point_record(task: Task, problem: Problem, point: EvalPoint, gen) -> dict:
    """Grade one decoded problem at one sweep point: one record (judgekit.store.records.RECORD_SCHEMA)."""
    import json

    outcome = task.extract_outcome(problem, gen.text)
    s = gen.stats
    return {"point": point.key, "config": point.config_key, "label": point.label, "rule": point.rule,
            "params": json.dumps(point.params, sort_keys=True), "temperature": point.temperature,
            "block_size": point.block_size, "seed": point.seed, "problem": problem.problem_id,
            "completion_ids": gen.token_ids, "text": gen.text, "finish_reason": gen.finish_reason,
            "outcome": json.dumps(outcome, default=str), "correct": bool(task.grade(problem, outcome)),
            "new_tokens": s.new_tokens, "target_calls": s.target_calls, "draft_calls": s.draft_calls,
            "accept_hist": s.accept_hist, "wall_time": s.wall_time,
            "prompt": problem.question, "reference": json.dumps(problem.reference, default=str)}


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
             progress=None, batch_size: int = 1, grade_workers: int = 4, bars=None) -> dict:
    """Evaluate this rank's share of the (point, problem) pairs not yet in out_dir; returns counts.

    Pairs are enumerated point-major and dealt round-robin to ranks, so each rank holds a slice of every point
    and the ranks finish together. `progress(message)` is called after each point this rank works on.
    ``batch_size`` > 1 decodes up to that many problems of a point in lockstep on the fast path, a finished
    problem's place taken by the next (continuous batching); records are committed every ``flush_every``
    finished problems. Every problem keeps its own seed, so greedy records do not depend on the batch size
    (tested). Grading (for code: sandboxed test runs) happens on ``grade_workers`` threads while decoding goes on.
    ``bars`` (a :class:`judgekit.progress.EvalProgress`) shows per-point and overall progress bars.
    """
    import time as _time
    from concurrent.futures import ThreadPoolExecutor

    from judgekit.store.records import RecordWriter

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
    if bars:
        bars.overall.reset(total=len(todo))
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
            if bars:
                bars.start_point(f"{point.label} T={point.temperature:g} g={point.block_size}", len(qis))

            def on_finish(i, gen, qis=qis, point=point, grading=grading):
                grading.add(pool.submit(point_record, task, problems[qis[i]], point, gen))
                if bars:
                    bars.problem_done(gen)
            seeds = [problem_seed(point.seed, problems[qi].problem_id) for qi in qis]
            # All of the point's problems in one call: finished rows are refilled (continuous batching), and
            # each finished problem is graded on the pool while the rest decode.
            decoder.generate_batch(
                [prompts[qi] for qi in qis], settings.max_new_tokens, task.stop_strings, seeds,
                batch_size=batch_size,
                on_finish=on_finish)
            grading.commit(wait_all=True)
            if bars:
                bars.close_point()
            if progress:
                progress(f"[{n_point}/{len(by_point)}] {point.label} T={point.temperature:g} "
                         f"gamma={point.block_size} seed={point.seed}: {grading.correct}/{len(qis)} correct "
                         f"({_time.perf_counter() - start:.1f}s)")
    if bars:
        bars.close()
    return {"pairs": len(pairs), "mine": len(mine), "evaluated": len(todo), "skipped": len(mine) - len(todo)}
