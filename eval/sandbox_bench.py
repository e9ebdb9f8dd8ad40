"""Grading speed of the sandbox: the 164 HumanEval canonical solutions (each with its tests) through
`judgekit.sandbox.run_many`, with the filesystem layer on and off (alternating rounds, so both see the same
machine load). Prints programs/s of each and their ratio.

    python eval/sandbox_bench.py [--workers 2] [--rounds 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import judgekit.sandbox as sandbox
from judgekit.sandbox import SandboxLimits, run_many
from judgekit.tasks.humaneval import HumanEval


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    task = HumanEval()
    jobs = [(task.program(p, p.meta["canonical_solution"]), None) for p in task.load()]
    limits = SandboxLimits(timeout_s=10, memory_mb=2048)
    rates: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(args.rounds):
        for confine in (False, True):
            sandbox._CONFINE_FS = confine
            run_many(jobs[:4], limits=limits, workers=args.workers)  # warm-up
            start = time.perf_counter()
            results = run_many(jobs, limits=limits, workers=args.workers)
            dt = time.perf_counter() - start
            rates[confine].append(len(jobs) / dt)
            print(f"fs layer {'on ' if confine else 'off'}: {len(jobs)} programs in {dt:.2f} s = "
                  f"{len(jobs) / dt:.1f} programs/s, passed {sum(r.ok for r in results)}/{len(jobs)}, "
                  f"isolation {results[0].isolation}")
    on, off = statistics.median(rates[True]), statistics.median(rates[False])
    print(f"median programs/s: fs off {off:.1f}, fs on {on:.1f}, ratio on/off {on / off:.2f}")


if __name__ == "__main__":
    main()
