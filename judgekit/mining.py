"""Semi-greedy counterfactual mining (AutoJudge, DESIGN.md §3), made fast.

Per problem, with greedy decoding: the target answers (response R); the draft is teacher-forced over R; at
the leftmost mismatch m at or after the left border the draft token is substituted and the target
completes greedily from R[:m] + [draft token]; the mismatch is *unimportant* if the outcome is equivalent to
the target's own (then R becomes the alternative) and *important* otherwise (R stays); the border moves to
m + 1 and the mismatches are re-derived on the current R, until none is left.

Where judgekit differs from the reference procedure in cost, not in result:

* Each model keeps one KV cache and a record of the token ids it holds. A rollout or a teacher-forcing pass
  crops the cache to the longest common prefix with the sequence it needs and feeds only the rest, so the
  shared prefix is never recomputed (``Cache.crop(-n)`` in transformers 5 removes n tokens).
* A rollout stops as soon as the task says its outcome is fixed (e.g. the `#### N` line is complete).
* The feature — the target's hidden state at m *after reading the draft token*, which is exactly what the
  verification forward of speculative decoding computes — comes from the rollout's own first forward.

Choices that are ours (documented in mining/README.md):

* Outcomes are read from a completion cut at the point where the task says its outcome is fixed, and
  mismatches are only searched before that point of the current response: text after it cannot change the
  outcome, so such positions carry no label signal. The reference implementation applies the same rule.
* When the target's own answer is wrong, the problem is still mined: labels compare the alternative's
  outcome with the target's (a mismatch that changes a wrong answer is still important), and each record
  carries ``target_correct`` so training can filter or weight such problems.
* The draft feature (``--draft-features``) is the draft's hidden state after reading the context token
  before the mismatch: the state that proposed the draft token.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from transformers import DynamicCache

from judgekit.decoding import eos_ids
from judgekit.models import ModelPair, encode_prompt
from judgekit.tasks.base import Problem, Task


@dataclass(frozen=True)
class MineConfig:
    max_new_tokens: int = 256
    layers: tuple[int, ...] = (-1,)  # indexes into transformers' hidden_states tuple (-1 = final, after norm)
    draft_features: bool = False
    chat_template: bool = True


@dataclass
class MismatchRecord:
    position: int
    context_ids: list[int]
    draft_token: int
    target_token: int
    important: bool
    alt_outcome: Any
    rollout: int
    features: dict[int, np.ndarray]
    draft_hidden: np.ndarray | None = None


@dataclass
class ProblemResult:
    problem: Problem
    prompt_ids: list[int]
    response_ids: list[int]
    response_text: str
    target_outcome: Any
    target_correct: bool
    n_rollouts: int
    records: list[MismatchRecord] = field(default_factory=list)
    wall_time: float = 0.0

    def mismatch_rows(self, layers: tuple[int, ...]) -> list[dict]:
        p = self.problem
        rows = []
        for r in self.records:
            row = {
                "task": p.task, "problem_id": p.problem_id, "position": r.position,
                "prompt_len": len(self.prompt_ids), "context_ids": r.context_ids,
                "draft_token": r.draft_token, "target_token": r.target_token, "important": r.important,
                "target_outcome": json.dumps(self.target_outcome), "alt_outcome": json.dumps(r.alt_outcome),
                "target_correct": self.target_correct, "rollout": r.rollout,
            }
            for layer in layers:
                row[f"hidden_l{layer}"] = r.features[layer]
            if r.draft_hidden is not None:
                row["draft_hidden"] = r.draft_hidden
            rows.append(row)
        return rows

    def problem_row(self, rank: int) -> dict:
        p = self.problem
        return {
            "task": p.task, "problem_id": p.problem_id, "response": self.response_text,
            "response_ids": self.response_ids, "n_rollouts": self.n_rollouts,
            "n_mismatches": len(self.records), "n_important": sum(r.important for r in self.records),
            "target_outcome": json.dumps(self.target_outcome), "target_correct": self.target_correct,
            "wall_time": self.wall_time, "rank": rank,
        }


def common_prefix_len(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    return next(i for i in range(n) if a[i] != b[i])


class _CachedModel:
    """A model with one KV cache and the ids it holds; feeding a sequence reuses the longest common prefix."""

    def __init__(self, model, vocab: int):
        self.model = model
        self.vocab = vocab
        self.device = next(model.parameters()).device
        self.cache = DynamicCache(config=model.config)
        self.ids: list[int] = []

    def feed(self, seq: list[int], keep_all_logits: bool = False, hidden: bool = False):
        """Make the cache hold ``seq``; returns the forward outputs of the part that had to be computed.

        At least the last token is always recomputed, so its logits and hidden states are available.
        """
        common = min(common_prefix_len(self.ids, seq), len(seq) - 1)
        if len(self.ids) > common:
            self.cache.crop(-(len(self.ids) - common))
        inp = torch.tensor([seq[common:]], device=self.device)
        out = self.model(input_ids=inp, cache=self.cache, use_cache=True, output_hidden_states=hidden,
                         logits_to_keep=0 if keep_all_logits else 1)
        self.ids = list(seq)
        return common, out


class Miner:
    """Mines one problem at a time with a target/draft pair on a task (greedy)."""

    def __init__(self, pair: ModelPair, task: Task, config: MineConfig | None = None):
        self.pair = pair
        self.task = task
        self.cfg = config or MineConfig()
        self.eos = eos_ids(pair)
        self.tokenizer = pair.tokenizer

    # -- outcomes -------------------------------------------------------------------------------------------
    def _text(self, completion: list[int]) -> str:
        return self.tokenizer.decode(completion, skip_special_tokens=True)

    def _finished(self, completion: list[int]) -> bool:
        """The completion cannot change its outcome any more: EOS, a stop string, or a fixed outcome."""
        if completion and completion[-1] in self.eos:
            return True
        text = self._text(completion)
        return self.task.outcome_fixed(text) or any(s in text for s in self.task.stop_strings)

    def outcome(self, problem: Problem, completion: list[int]) -> Any:
        return self.task.extract_outcome(problem, self._text(completion))

    # -- the two models ---------------------------------------------------------------------------------------
    @torch.inference_mode()
    def _rollout(self, target: _CachedModel, prompt: list[int], completion: list[int]):
        """Greedy target completion of prompt + completion, stopped once the outcome is fixed.

        Returns the generated tokens and the hidden states (requested layers) after reading the last given token.
        """
        _, out = target.feed(prompt + completion, hidden=True)
        hidden = {layer: out.hidden_states[layer][0, -1].float().cpu().numpy().astype(np.float16)
                  for layer in self.cfg.layers}
        generated: list[int] = []
        while not self._finished(completion + generated) and len(completion) + len(generated) < self.cfg.max_new_tokens:
            tok = int(out.logits[0, -1, : self.pair.vocab_size].argmax())
            generated.append(tok)
            if self._finished(completion + generated) or len(completion) + len(generated) >= self.cfg.max_new_tokens:
                break
            out = target.model(input_ids=torch.tensor([[tok]], device=target.device), cache=target.cache,
                               use_cache=True, logits_to_keep=1)
            target.ids.append(tok)
        return generated, hidden

    @torch.inference_mode()
    def _draft_argmax(self, draft: _CachedModel, seq: list[int], preds: list[int], hiddens: list) -> None:
        """Teacher-force the draft over seq incrementally: preds[i] = argmax given seq[:i] for i <= len(seq).

        ``preds``/``hiddens`` are updated in place; only positions after the common prefix are recomputed.
        """
        common, out = draft.feed(seq, keep_all_logits=True, hidden=self.cfg.draft_features)
        del preds[common + 1:]
        preds.extend(out.logits[0, :, : self.pair.vocab_size].argmax(-1).tolist())
        if self.cfg.draft_features:
            del hiddens[common + 1:]
            hs = out.hidden_states[-1][0].float().cpu().numpy().astype(np.float16)
            hiddens.extend(list(hs))

    # -- the algorithm --------------------------------------------------------------------------------------
    def mine(self, problem: Problem) -> ProblemResult:
        start = time.perf_counter()
        prompt_text = self.task.build_prompt(problem, self.tokenizer, chat_template=self.cfg.chat_template)
        prompt = encode_prompt(self.tokenizer, prompt_text)
        target = _CachedModel(self.pair.target, self.pair.vocab_size)
        draft = _CachedModel(self.pair.draft, self.pair.vocab_size)
        response, _ = self._rollout(target, prompt, [])
        target_outcome = self.outcome(problem, response)
        result = ProblemResult(problem, prompt, [], "", target_outcome,
                               bool(self.task.grade(problem, target_outcome)), n_rollouts=1)
        preds: list[int] = [-1]  # preds[i] = draft argmax for absolute position i (none for position 0)
        hiddens: list = [None]  # hiddens[i] = draft state that predicted position i
        left = 0
        while True:
            m = self._next_mismatch(draft, prompt, response, left, preds, hiddens)
            if m is None:
                break
            d = preds[len(prompt) + m]
            alt_prefix = response[:m] + [d]
            generated, hidden = self._rollout(target, prompt, alt_prefix)
            alternative = alt_prefix + generated
            result.n_rollouts += 1
            alt_outcome = self.outcome(problem, alternative)
            important = not self.task.equivalent(target_outcome, alt_outcome)
            result.records.append(MismatchRecord(
                position=m, context_ids=prompt + response[:m], draft_token=d, target_token=response[m],
                important=important, alt_outcome=alt_outcome, rollout=result.n_rollouts, features=hidden,
                draft_hidden=hiddens[len(prompt) + m] if self.cfg.draft_features else None,
            ))
            if not important:
                response = alternative
            left = m + 1
        result.response_ids = response
        result.response_text = self._text(response)
        result.wall_time = time.perf_counter() - start
        return result

    def _next_mismatch(self, draft, prompt, response, left, preds, hiddens) -> int | None:
        if left >= len(response):
            return None
        self._draft_argmax(draft, prompt + response, preds, hiddens)
        base = len(prompt)
        for i in range(left, len(response)):
            if preds[base + i] != response[i]:
                return i
        return None


def mine_to_dir(pair: ModelPair, task: Task, problems: list[Problem], out_dir: str, cfg: MineConfig, *,
                split: str, data_file: str | None = None, limit: int | None = None, rank: int = 0,
                world_size: int = 1, resume: bool = False, flush_every: int = 4, progress: bool = True) -> dict:
    """Mine this rank's share of problems into out_dir, skipping those already committed by any rank.

    Results are committed every ``flush_every`` problems (mismatch shard, then problem shard as the commit
    marker), so a run killed at any moment and resumed yields exactly the records of an uninterrupted run.
    """
    from tqdm.auto import tqdm

    from judgekit.errors import JudgekitError
    from judgekit.store import RunSettings, ShardWriter

    ids = [p.problem_id for p in problems]
    if len(set(ids)) != len(ids):
        raise JudgekitError(f"task {task.name!r} yields duplicate problem ids; cannot mine resumably")
    settings = RunSettings(
        task=task.name, target=pair.target_name, draft=pair.draft_name, split=split, data_file=data_file,
        max_new_tokens=cfg.max_new_tokens, layers=tuple(cfg.layers), draft_features=cfg.draft_features,
        hidden_size=int(pair.target.config.hidden_size),
        draft_hidden_size=int(pair.draft.config.hidden_size) if cfg.draft_features else None, limit=limit,
    )
    writer = ShardWriter(out_dir, settings, rank=rank, world_size=world_size)
    done = writer.done_problem_ids()
    # Single process: refuse to continue silently. Under a launcher, ranks start at different moments and a
    # late rank may see its peers' first shards, so there the settings check of the manifest is the guard.
    if done and not resume and world_size == 1:
        raise JudgekitError(f"{out_dir} already holds a mining run; pass --resume to continue it or choose another --out")
    mine = [p for i, p in enumerate(problems) if i % world_size == rank and p.problem_id not in done]
    skipped = sum(1 for i, p in enumerate(problems) if i % world_size == rank) - len(mine)
    miner = Miner(pair, task, cfg)
    pending: list[ProblemResult] = []
    totals = {"mined": 0, "skipped": skipped, "mismatches": 0, "important": 0}

    def flush() -> None:
        if pending:
            writer.write([row for r in pending for row in r.mismatch_rows(cfg.layers)],
                         [r.problem_row(rank) for r in pending])
            pending.clear()

    bar = tqdm(mine, desc=f"mine {task.name} r{rank}", unit="problem", disable=not progress, dynamic_ncols=True)
    for problem in bar:
        result = miner.mine(problem)
        pending.append(result)
        totals["mined"] += 1
        totals["mismatches"] += len(result.records)
        totals["important"] += sum(r.important for r in result.records)
        bar.set_postfix(mismatches=totals["mismatches"], important=totals["important"])
        if len(pending) >= flush_every:
            flush()
    flush()
    return totals
