"""The run loop of `judgekit eval`: decode each (point, problem) pair not yet recorded, grade it on worker
threads, and commit records in Parquet via :mod:`judgekit.store.records` (resumable, sharded across ranks)."""

from __future__ import annotations

from judgekit.decode.decoder import SpeculativeDecoder
from judgekit.decode.sampling import SamplingConfig
from judgekit.errors import JudgekitError
from judgekit.evaluate.sweep import EvalPoint, EvalSettings, rule_kwargs
from judgekit.models import ModelPair, encode_prompt
from judgekit.decode.rules import Rule
from judgekit.tasks.base import Problem, Task


def problem_seed(seed: int, problem_id: str) -> int:
    """Per-problem sampling seed, stable when --limit or the sharding changes."""
    import zlib

    return (seed * 1_000_003 + zlib.crc32(problem_id.encode())) % (2 ** 62)


def _build_rule(point: EvalPoint, pair: ModelPair, judges: dict) -> Rule:
    """The point's rule; a judge is loaded once per directory (``judges`` caches), checked against the pair
    and placed on its device."""
    from judgekit.judge.head import bind_rule
    from judgekit.decode.rules import make_rule

    return bind_rule(make_rule(point.rule, **rule_kwargs(point.params, judges)), pair)


def point_record(task: Task, problem: Problem, point: EvalPoint, gen, judge_sha256: str | None = None) -> dict:
    """Grade one decoded problem at one sweep point: one record (judgekit.store.records.RECORD_SCHEMA)."""
    import json

    outcome = task.extract_outcome(problem, gen.text)
    s = gen.stats
    return {"point": point.key, "config": point.config_key, "label": point.label, "rule": point.rule,
            "params": json.dumps(point.params, sort_keys=True), "judge_sha256": judge_sha256,
            "temperature": point.temperature,
            "block_size": point.block_size, "tree": point.tree, "seed": point.seed, "problem": problem.problem_id,
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


def _judge_sha256(point: EvalPoint, judges: dict) -> str | None:
    """sha256 of a judge point's weights file: the record names the exact judge it used. A judge already
    loaded (``judges``) carries it in its config, verified against the file when it was read."""
    if point.rule != "judge":
        return None
    path = point.params["judge"]
    if path in judges and judges[path][0].config.get("weights_sha256"):
        return judges[path][0].config["weights_sha256"]
    from judgekit.judge.head import WEIGHTS_NAME, resolve_judge_dir
    from judgekit.store.shards import file_sha256

    return file_sha256(resolve_judge_dir(path) / WEIGHTS_NAME)


def eval_fingerprint(settings: EvalSettings) -> dict:
    """What eval.json records: the settings, plus the data file's sha256 (its path alone says nothing about
    its content, so a rewritten file is another evaluation, refused instead of reusing the old records)."""
    from judgekit.store.shards import file_sha256

    return {**settings.to_dict(), "data_sha256": file_sha256(settings.data_file) if settings.data_file else None}


def _todo(points: list[EvalPoint], problems: list[Problem], mine: list[tuple[int, int]], done: dict,
          hashes: dict[int, str | None]) -> list[tuple[int, int]]:
    """This rank's pairs not yet recorded; a recorded pair whose judge weights differ is refused."""
    todo = []
    for pi, qi in mine:
        key = (points[pi].key, problems[qi].problem_id)
        if key not in done:
            todo.append((pi, qi))
        elif done[key] is not None and done[key] != hashes[pi]:
            raise JudgekitError(f"the judge {points[pi].params.get('judge')} changed since its records for "
                                f"{points[pi].label} were written (weights sha256 {done[key][:12]}..., now "
                                f"{str(hashes[pi])[:12]}...); use a new --out")
    return todo


def run_eval(pair: ModelPair, task: Task, problems: list[Problem], points: list[EvalPoint],
             settings: EvalSettings, out_dir: str, rank: int = 0, world_size: int = 1, flush_every: int = 16,
             progress=None, batch_size: int = 1, grade_workers: int = 4, judges: dict | None = None,
             bars=None) -> dict:
    """Evaluate this rank's share of the (point, problem) pairs not yet in out_dir; returns counts.

    Pairs are enumerated point-major and dealt round-robin to ranks, so each rank holds a slice of every point
    and the ranks finish together. `progress(message)` is called after each point this rank works on.
    ``batch_size`` > 1 decodes up to that many problems of a point in lockstep on the fast path, a finished
    problem's place taken by the next (continuous batching); records are committed every ``flush_every``
    finished problems. Every problem keeps its own seed, so greedy records do not depend on the batch size
    (tested). Grading (for code: sandboxed test runs) happens on ``grade_workers`` threads while decoding goes on.
    ``judges``: the judges already read while expanding the sweep (Sweep.points), so none is read twice.
    ``bars`` (a :class:`judgekit.progress.EvalProgress`) shows per-point and overall progress bars.
    """
    from judgekit.dist import my_share
    from judgekit.store.records import RecordWriter, check_eval_dir, done_records

    if batch_size < 1 or grade_workers < 1:
        raise JudgekitError(f"batch size and grading workers must be >= 1, got {batch_size}, {grade_workers}")
    fingerprint = eval_fingerprint(settings)
    pairs = [(pi, qi) for pi in range(len(points)) for qi in range(len(problems))]
    mine = my_share(pairs, rank, world_size)
    # Every check (directory, settings, judges, rules) runs before anything is written: a refused run leaves
    # --out as it found it. The done-set is read again under the writer's lock, where it cannot go stale.
    check_eval_dir(out_dir, fingerprint)
    judges = {} if judges is None else judges
    hashes = {pi: _judge_sha256(points[pi], judges) for pi in sorted({pi for pi, _ in mine})}
    maybe = _todo(points, problems, mine, done_records(out_dir), hashes)
    rules = {pi: _build_rule(points[pi], pair, judges) for pi in sorted({pi for pi, _ in maybe})}
    with RecordWriter(out_dir, fingerprint, rank) as writer:
        todo = _todo(points, problems, maybe, writer.done(), hashes)
        _decode_and_record(pair, task, problems, points, settings, writer, todo, rules, hashes, flush_every,
                           progress, batch_size, grade_workers, bars)
    return {"pairs": len(pairs), "mine": len(mine), "evaluated": len(todo), "skipped": len(mine) - len(todo)}


def _decode_and_record(pair: ModelPair, task: Task, problems: list[Problem], points: list[EvalPoint],
                       settings: EvalSettings, writer, todo: list[tuple[int, int]], rules: dict[int, Rule],
                       hashes: dict[int, str | None], flush_every: int, progress, batch_size: int,
                       grade_workers: int, bars=None) -> None:
    """Decode the pairs point by point, grade them on worker threads, commit every flush_every records."""
    import time as _time
    from concurrent.futures import ThreadPoolExecutor

    prompts: dict[int, list[int]] = {}
    by_point: dict[int, list[int]] = {}
    for pi, qi in todo:
        by_point.setdefault(pi, []).append(qi)
    if bars:
        bars.overall.reset(total=len(todo))
    with ThreadPoolExecutor(max_workers=grade_workers, thread_name_prefix="judgekit-grade") as pool:
        for n_point, (pi, qis) in enumerate(by_point.items(), 1):
            point = points[pi]
            sampling = SamplingConfig(point.temperature, settings.top_k, settings.top_p)
            decoder = SpeculativeDecoder(pair, rules[pi], point.block_size, sampling, tree=point.tree)
            start = _time.perf_counter()
            for qi in qis:
                if qi not in prompts:
                    prompts[qi] = encode_prompt(pair.tokenizer, task.build_prompt(
                        problems[qi], pair.tokenizer, chat_template=settings.chat_template))
            grading = _Grading(writer, flush_every)
            if bars:
                bars.start_point(f"{point.label} T={point.temperature:g} g={point.block_size}", len(qis))

            def on_finish(i, gen, qis=qis, point=point, grading=grading, pi=pi):
                grading.add(pool.submit(point_record, task, problems[qis[i]], point, gen, hashes[pi]))
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
