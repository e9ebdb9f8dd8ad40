"""Mining speed benchmark (`judgekit bench mine`): judgekit's miner against the plain reference procedure
(:mod:`judgekit.mine.reference`) on the same problems; label agreement and the time ratio."""

from __future__ import annotations

import torch

from judgekit.benchmarks.decode import timed


def run_mine_bench(pair, task, problems, cfg, batch_size: int = 1) -> dict:
    """Mine the same problems with judgekit's miner (``batch_size`` problems advancing together) and the
    fair reference procedure (batch 1, cached ``generate`` rollouts); compare labels and time.

    The two alternate chunk by chunk (``batch_size`` problems each), so a change in the load of a shared
    machine falls on both; wall and process CPU time are both summed."""
    from judgekit.mine.miner import Miner
    from judgekit.mine.reference import ReferenceMiner, label_agreement

    ours, ref = [], []
    wall = {"ours": 0.0, "ref": 0.0}
    cpu = {"ours": 0.0, "ref": 0.0}
    with torch.inference_mode():
        Miner(pair, task, cfg).mine(problems[0])  # warm-up
        ReferenceMiner(pair, task, cfg).mine(problems[0])
        for i in range(0, len(problems), batch_size):
            chunk = problems[i: i + batch_size]
            secs, cpu_secs, out = timed(lambda: list(Miner(pair, task, cfg, batch_size).mine_many(chunk)), pair.device)
            wall["ours"] += secs
            cpu["ours"] += cpu_secs
            ours.extend(out)
            secs, cpu_secs, out = timed(lambda: [ReferenceMiner(pair, task, cfg).mine(p) for p in chunk], pair.device)
            wall["ref"] += secs
            cpu["ref"] += cpu_secs
            ref.extend(out)
    agreement, same, union = label_agreement(ours, ref)
    return {
        "problems": len(problems), "batch_size": batch_size, "agreement": agreement, "agreeing": same, "union": union,
        "mismatches": sum(len(r.records) for r in ours),
        "important": sum(m.important for r in ours for m in r.records),
        "rollouts_ours": sum(r.n_rollouts for r in ours), "rollouts_reference": sum(r.n_rollouts for r in ref),
        "seconds_ours": wall["ours"], "seconds_reference": wall["ref"],
        "cpu_seconds_ours": cpu["ours"], "cpu_seconds_reference": cpu["ref"],
        "speedup": wall["ref"] / max(wall["ours"], 1e-9), "cpu_speedup": cpu["ref"] / max(cpu["ours"], 1e-9),
    }


def format_mine_report(r: dict, title: str) -> str:
    return "\n".join([
        title,
        f"problems {r['problems']} (judgekit batch size {r['batch_size']}), mismatches {r['mismatches']} ({r['important']} important), "
        f"rollouts judgekit {r['rollouts_ours']} / reference {r['rollouts_reference']}",
        f"label agreement: {r['agreement']:.4f} ({r['agreeing']}/{r['union']} mismatches)",
        f"wall time: judgekit {r['seconds_ours']:.2f}s, reference {r['seconds_reference']:.2f}s, "
        f"ratio reference / judgekit: {r['speedup']:.2f}x",
        f"CPU time: judgekit {r['cpu_seconds_ours']:.2f}s, reference {r['cpu_seconds_reference']:.2f}s, "
        f"ratio reference / judgekit: {r['cpu_speedup']:.2f}x",
    ])
