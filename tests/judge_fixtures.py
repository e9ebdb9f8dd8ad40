"""Synthetic mining directories with a known signal, written through the real store (for training tests)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from judgekit.store.mined import RunSettings, ShardWriter


def write_mined(out: str | Path, task: str, n_problems: int, *, per_problem: tuple[int, int] = (1, 4),
                hidden: int = 16, draft_hidden: int | None = 8, layers: tuple[int, ...] = (-1, 1),
                signal: float = 1.0, important_rate: float = 0.3, seed: int = 0, target: str = "tiny-target",
                draft: str = "tiny-draft", labels: str = "mixed", flush_every: int = 8) -> Path:
    """A mining directory of `n_problems` problems with 1-4 mismatches each.

    Features are Gaussian; an important row is shifted by `signal` along a fixed direction in layer 1 and,
    more weakly, in the last layer and the draft feature, so a linear head has a known, learnable signal.
    """
    rng = np.random.default_rng(seed)
    direction = np.random.default_rng(1234).standard_normal(hidden)
    direction /= np.linalg.norm(direction)
    settings = RunSettings(task=task, target=target, draft=draft, split="train", data_file=None,
                           max_new_tokens=64, layers=layers, draft_features=draft_hidden is not None,
                           hidden_size=hidden, draft_hidden_size=draft_hidden, limit=n_problems)
    writer = ShardWriter(out, settings)
    mism, probs = [], []
    for p in range(n_problems):
        pid = f"{task}/{p}"
        n = int(rng.integers(per_problem[0], per_problem[1] + 1))
        imp_count = 0
        for i in range(n):
            y = {"mixed": rng.random() < important_rate, "all": True, "none": False}[labels]
            imp_count += int(y)
            row = {"task": task, "problem_id": pid, "position": i, "prompt_len": 3, "context_ids": [1, 2, 3],
                   "draft_token": 5, "target_token": 6, "important": bool(y), "target_outcome": "1",
                   "alt_outcome": "2" if y else "1", "target_correct": True, "rollout": i + 2}
            for layer in layers:
                strength = signal if layer == 1 else 0.5 * signal
                row[f"hidden_l{layer}"] = rng.standard_normal(hidden) * 2 + 3 + strength * y * direction * 3
            if draft_hidden is not None:
                row["draft_hidden"] = rng.standard_normal(draft_hidden) + signal * y * 0.5
            mism.append(row)
        probs.append({"task": task, "problem_id": pid, "response": "r", "response_ids": [1], "n_rollouts": n + 1,
                      "n_mismatches": n, "n_important": imp_count, "target_outcome": "1", "target_correct": True,
                      "wall_time": 0.01})
        if len(probs) == flush_every:
            writer.write(mism, probs)
            mism, probs = [], []
    if probs:
        writer.write(mism, probs)
    return Path(out)
