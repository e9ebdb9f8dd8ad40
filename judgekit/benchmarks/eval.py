"""`judgekit bench eval`: evaluation throughput of `judgekit eval` at several batch sizes, in one process.

Each batch size runs the same :func:`judgekit.evaluate.run.run_eval` (decode, grade, record) into its own
directory; the report gives aggregate new tokens per second (wall and, on CPU, process CPU time, which does not
count other processes' load) and the ratio to the first batch size, and checks that greedy records are equal.
A warm-up decode first, so no batch size pays one-time costs (allocations, lazy imports) for the others.
With ``repeats`` > 1 the batch sizes run in rounds, their order rotated by one each round as in `bench decode`
(:func:`judgekit.benchmarks.decode.round_order`; a slow spell of a shared machine falls on all of them), and each
one's median time is reported.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class EvalTiming:
    batch_size: int
    new_tokens: int
    wall_s: float
    cpu_s: float
    correct: int
    problems: int

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def tokens_per_cpu_s(self) -> float:
        return self.new_tokens / self.cpu_s if self.cpu_s > 0 else 0.0


def run_eval_bench(pair, task, problems, points, settings, batch_sizes: list[int],
                   out_root: str | None = None, repeats: int = 1) -> tuple[list[EvalTiming], bool]:
    """Time run_eval at each batch size; returns the timings and whether the greedy records agree."""
    from judgekit.benchmarks.decode import round_order
    from judgekit.decode.decoder import SpeculativeDecoder
    from judgekit.evaluate.run import run_eval
    from judgekit.models import encode_prompt
    from judgekit.store.records import read_records
    from judgekit.decode.rules import make_rule

    root = Path(out_root or tempfile.mkdtemp(prefix="judgekit-bench-eval-"))
    warm = SpeculativeDecoder(pair, make_rule("lossless"), points[0].block_size)
    warm_ids = encode_prompt(pair.tokenizer, task.build_prompt(problems[0], pair.tokenizer))
    warm.generate_batch([warm_ids] * 2, max_new_tokens=8, batch_size=2)
    import statistics

    walls: dict[int, list[float]] = {bs: [] for bs in batch_sizes}
    cpus: dict[int, list[float]] = {bs: [] for bs in batch_sizes}
    records, last_rows = [], {}
    for round_ in range(repeats):
        for bs in round_order(batch_sizes, round_):
            out = root / (f"batch-{bs}" if repeats == 1 else f"batch-{bs}-run{round_ + 1}")
            wall, cpu = time.perf_counter(), time.process_time()
            run_eval(pair, task, problems, points, settings, str(out), flush_every=max(16, bs), batch_size=bs)
            walls[bs].append(time.perf_counter() - wall)
            cpus[bs].append(time.process_time() - cpu)
            rows = read_records(out).to_pylist()
            last_rows[bs] = rows
            records.append({(r["point"], r["problem"]): r["completion_ids"] for r in rows
                            if r["temperature"] == 0})
    timings = [EvalTiming(bs, sum(r["new_tokens"] for r in last_rows[bs]), statistics.median(walls[bs]),
                          statistics.median(cpus[bs]), sum(r["correct"] for r in last_rows[bs]), len(last_rows[bs]))
               for bs in batch_sizes]
    identical = all(r == records[0] for r in records[1:])
    return timings, identical


def format_eval_report(timings: list[EvalTiming], identical: bool, title: str, cpu_clock: bool) -> str:
    base = timings[0]
    lines = [title, f"{'batch':>5}  {'records':>7}  {'tokens':>7}  {'correct':>7}  {'wall s':>7}  {'cpu s':>7}  "
                    f"{'tok/s wall':>10}  {'tok/s cpu':>9}  {'vs batch ' + str(base.batch_size):>11}"]
    for t in timings:
        ratio = (t.tokens_per_cpu_s / base.tokens_per_cpu_s if cpu_clock else t.tokens_per_s / base.tokens_per_s)
        lines.append(f"{t.batch_size:>5}  {t.problems:>7}  {t.new_tokens:>7}  {t.correct:>7}  {t.wall_s:>7.2f}  "
                     f"{t.cpu_s:>7.2f}  {t.tokens_per_s:>10.1f}  {t.tokens_per_cpu_s:>9.1f}  {ratio:>10.2f}x")
    lines.append(f"greedy records identical across batch sizes: {identical}   "
                 f"(ratios on {'CPU' if cpu_clock else 'wall'} time)")
    return "\n".join(lines)
