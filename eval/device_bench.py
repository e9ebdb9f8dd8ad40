"""The GPU checks of the decode and mining benchmarks, as one prepared script for a lent device machine.

Run from the repository root on the device (its python has torch and transformers; judgekit is imported
from the working tree):  PYTHONPATH=. python3 eval/device_bench.py
It prints (1) `bench decode` on random-init Qwen2.5-7B / Qwen2.5-0.5B shapes in bf16 with controlled agreement
and (2) `bench mine` on the pocket pair on the GPU. Each part is timed and bounded to fit a 10-minute call.
"""

from __future__ import annotations

import sys
import time

import torch


def main() -> int:
    from judgekit.bench import format_mine_report, format_report, run_decode_bench, run_mine_bench, synthetic_pair
    from judgekit.mining import MineConfig
    from judgekit.models import load_model_pair
    from judgekit.tasks import get_task

    assert torch.cuda.is_available(), "run this on the GPU machine"
    start = time.time()
    pair = synthetic_pair("qwen2.5-7b", "qwen2.5-0.5b", agreement=0.8, device="cuda", dtype="bf16")
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, pair.vocab_size, (64,), generator=g).tolist() for _ in range(3)]
    timings, identical = run_decode_bench(pair, prompts, gamma=8, max_new_tokens=256)
    print(format_report(timings, identical, "GPU: qwen2.5-7b / qwen2.5-0.5b shapes, bf16, gamma=8, 3 prompts x 256"))
    del pair
    torch.cuda.empty_cache()
    print(f"[{time.time() - start:.0f}s]", flush=True)
    pocket = load_model_pair("pocket-target", "pocket-draft", device="cuda", dtype="fp32")
    task = get_task("pocket-math")
    for batch in (1, 16):
        report = run_mine_bench(pocket, task, task.load("train", limit=64), MineConfig(max_new_tokens=256), batch)
        print(format_mine_report(report, f"GPU: mining pocket-math, 64 problems, batch {batch}"), flush=True)
    print(f"[{time.time() - start:.0f}s]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
