"""The GPU figures of the decode and mining benchmarks, as one prepared script for a lent device machine.

Run from the repository root on the device (its python has torch and transformers; judgekit is imported
from the working tree):  PYTHONPATH=. python3 eval/device_bench.py [--quick] [--compile]
It runs `bench decode` on random-init Qwen2.5-7B / Qwen2.5-0.5B shapes in bf16 (docs/design.md §8 controlled
pair) at 90 % and 70 % agreement, gamma 8, batch 1 (HF target-only, HF assisted, judgekit eager and fast
path, the fast path with CUDA-graph replay) and batch 32 (HF target-only batched generate and judgekit's fast
path with and without graphs; the sequential decoders would not fit the time), each also with a static draft
tree of the same depth ("judgekit tree", ``--tree``, default 2,2,1,1,1,1,1,1: on a GPU a wider target forward
costs little more, which is where a tree's higher block efficiency should pay), then `bench mine` on the pocket pair, and prints one table at the end. Ratios are on
wall time. Each part checks the clock and is skipped, saying so, when the remaining budget is too small.
It refuses to run without CUDA: the GPU figures are never produced on a CPU.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

BUDGET_S = 540  # one device call is limited to 10 minutes
TREE = "2,2,1,1,1,1,1,1"  # depth 8 = the chain's gamma, two siblings at the first two levels (30 nodes)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer tokens (a smoke run)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the fast path's forwards")
    parser.add_argument("--no-graphs", action="store_true", help="skip the CUDA-graph rows")
    parser.add_argument("--budget", type=float, default=BUDGET_S)
    parser.add_argument("--tree", default=TREE, help="the static draft tree timed beside the chain ('' for none)")
    parser.add_argument("--smoke-cpu", action="store_true",
                        help="check the script itself on a CPU with the small cpu pair (not GPU figures)")
    args = parser.parse_args()
    device, dtype, target, draft = "cuda", "bf16", "qwen2.5-7b", "qwen2.5-0.5b"
    if args.smoke_cpu:
        device, dtype, target, draft = "cpu", "fp32", "cpu-target", "cpu-draft"
        args.quick = True
        torch.set_num_threads(1)
    elif not torch.cuda.is_available():
        print("device_bench: CUDA is not available; the GPU figures need a GPU (nothing was measured)")
        return 2
    from judgekit.benchmarks import (format_mine_report, format_report, run_decode_bench, run_mine_bench,
                                     synthetic_pair)
    from judgekit.mine.miner import MineConfig
    from judgekit.models import load_model_pair
    from judgekit.tasks import get_task

    start = time.time()
    left = lambda: args.budget - (time.time() - start)  # noqa: E731
    new_tokens = 8 if args.smoke_cpu else 32 if args.quick else 128
    table: list[tuple] = []
    print(f"GPU: {torch.cuda.get_device_name(0)}" if device == "cuda" else "CPU smoke run: NOT GPU figures",
          flush=True)
    for agreement in (0.9, 0.7):
        if left() < 120:
            print(f"skipped agreement {agreement}: {left():.0f}s left", flush=True)
            continue
        pair = synthetic_pair(target, draft, agreement=agreement, device=device, dtype=dtype)
        g = torch.Generator().manual_seed(0)
        prompts = [torch.randint(0, pair.vocab_size, (64,), generator=g).tolist() for _ in range(32)]
        hf_rate = None
        runs = [(1, prompts[:2], None), (32, prompts, ("judgekit fast", "judgekit graphs", "judgekit tree"))]
        for batch, ps, only in runs:
            if left() < 60:
                print(f"skipped batch {batch} at agreement {agreement}: {left():.0f}s left", flush=True)
                continue
            timings, identical = run_decode_bench(pair, ps, gamma=8, max_new_tokens=new_tokens, batch_size=batch,
                                                  compile=args.compile, only=only,
                                                  cuda_graphs=device == "cuda" and not args.no_graphs,
                                                  tree=args.tree or None)
            title = (f"{target} / {draft} shapes, {dtype}, agreement {agreement}, gamma 8, batch {batch}, "
                     f"{len(ps)} prompts x {new_tokens} tokens [{time.time() - start:.0f}s]")
            print(format_report(timings, identical, title, cpu_clock=False), flush=True)
            hf = next((t for t in timings if t.name == "HF assisted"), None)
            if batch == 1 and hf is not None:
                hf_rate = hf.tokens_per_s
            for t in timings:
                ratio = t.tokens_per_s / hf_rate if hf_rate else float("nan")
                table.append((f"agree {agreement}", batch, t.name, t.tokens_per_s, ratio, identical))
        del pair
        if device == "cuda":
            torch.cuda.empty_cache()
    if left() > 90:
        pocket = load_model_pair("pocket-target", "pocket-draft", device=device, dtype="fp32")
        task = get_task("pocket-math")
        problems = task.load("train", limit=4 if args.smoke_cpu else 16 if args.quick else 64)
        report = run_mine_bench(pocket, task, problems, MineConfig(max_new_tokens=256), batch_size=16)
        print(format_mine_report(report, f"mining pocket-math, {len(problems)} problems, batch 16"), flush=True)
        table.append(("mine pocket-math", 16, "judgekit miner / reference", len(problems) / report["seconds_ours"],
                      report["speedup"], report["agreement"] >= 0.99))
    else:
        print(f"skipped the mining bench: {left():.0f}s left")
    print("\nsummary (tokens/s wall; ratio = vs HF assisted at batch 1 of the same agreement; mining: problems/s "
          "and reference / judgekit)")
    print(f"{'setting':<18}{'batch':>6}  {'decoder':<28}{'rate':>10}{'ratio':>9}  ok")
    for setting, batch, name, rate, ratio, ok in table:
        print(f"{setting:<18}{batch:>6}  {name:<28}{rate:>10.1f}{ratio:>8.2f}x  {ok}")
    print(f"[{time.time() - start:.0f}s]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
