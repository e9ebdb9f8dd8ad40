"""A plain reimplementation of the reference mining procedure, for the speed and agreement benchmark.

It does what the official AutoJudge code does: every rollout is transformers' KV-cached greedy
``generate`` from the prompt plus the prefix (to EOS, a stop string or max_new_tokens), the draft is
teacher-forced with one full forward over the whole response for every mismatch, one problem at a time
(batch 1). It is the fair baseline for ``judgekit bench mine``: what judgekit saves over it is prefix
reuse across rollouts, early stopping at a fixed outcome, copy-draft verification and batching. Outcomes and the search range follow the same rule as :mod:`judgekit.mine.miner`
(outcome read at the point where it is fixed; no mismatches searched after it), so both label the same set.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from judgekit.mine.miner import MismatchRecord, Miner, ProblemResult
from judgekit.models import encode_prompt
from judgekit.tasks.base import Problem


class ReferenceMiner(Miner):
    @torch.inference_mode()
    def _full_greedy(self, prompt: list[int], completion: list[int]) -> tuple[list[int], dict]:
        """Cached greedy ``generate`` to EOS / stop string / max_new_tokens (counting the given completion),
        plus the hidden states after reading the last given token (from the prefill forward)."""
        pair = self.pair
        ids = torch.tensor([prompt + completion], device=pair.device)
        budget = self.cfg.max_new_tokens - len(completion)
        if budget <= 0 or (completion and completion[-1] in self.eos):
            out = pair.target(ids, output_hidden_states=True)
            hidden = {layer: out.hidden_states[layer][0, -1].float().cpu().numpy().astype(np.float16)
                      for layer in self.cfg.layers}
            return [], hidden
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else next(iter(self.eos), 0)
        extra = {"stop_strings": list(self.task.stop_strings), "tokenizer": self.tokenizer} \
            if self.task.stop_strings else {}
        out = pair.target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=budget,
                                   min_new_tokens=0, do_sample=False, eos_token_id=sorted(self.eos) or None,
                                   pad_token_id=pad, output_hidden_states=True, return_dict_in_generate=True,
                                   **extra)
        hidden = {layer: out.hidden_states[0][layer][0, -1].float().cpu().numpy().astype(np.float16)
                  for layer in self.cfg.layers}
        generated = out.sequences[0, ids.shape[1]:].tolist()
        eos_at = next((i for i, t in enumerate(generated) if t in self.eos), None)
        if eos_at is not None:  # drop the padding generate appends after EOS
            generated = generated[: eos_at + 1]
        return generated, hidden

    def _fixed_len(self, completion: list[int]) -> int:
        """Length of the shortest prefix whose outcome is fixed (the whole completion if none is)."""
        for j in range(1, len(completion) + 1):
            if self._finished(completion[:j]):
                return j
        return len(completion)

    def _outcome_at_fixed(self, problem: Problem, completion: list[int]):
        return self.outcome(problem, completion[: self._fixed_len(completion)])

    @torch.inference_mode()
    def mine(self, problem: Problem) -> ProblemResult:
        start = time.perf_counter()
        prompt = encode_prompt(self.tokenizer, self.task.build_prompt(problem, self.tokenizer,
                                                                      chat_template=self.cfg.chat_template))
        response, _ = self._full_greedy(prompt, [])
        target_outcome = self._outcome_at_fixed(problem, response)
        result = ProblemResult(problem, prompt, [], "", target_outcome,
                               bool(self.task.grade(problem, target_outcome)), n_rollouts=1)
        left = 0
        while True:
            logits = self.pair.draft(torch.tensor([prompt + response], device=self.pair.device)).logits[0]
            preds = logits[len(prompt) - 1: -1, : self.pair.vocab_size].argmax(-1).tolist()
            limit = self._fixed_len(response)
            m = next((i for i in range(left, limit) if preds[i] != response[i]), None)
            if m is None:
                break
            alt_prefix = response[:m] + [preds[m]]
            generated, hidden = self._full_greedy(prompt, alt_prefix)
            alternative = alt_prefix + generated
            result.n_rollouts += 1
            alt_outcome = self._outcome_at_fixed(problem, alternative)
            important = not self.task.equivalent(target_outcome, alt_outcome)
            result.records.append(MismatchRecord(m, prompt + response[:m], preds[m], response[m], important,
                                                 alt_outcome, result.n_rollouts, hidden))
            if not important:
                response = alternative
            left = m + 1
        result.response_ids = response[: self._fixed_len(response)]
        result.response_text = self._text(result.response_ids)
        result.wall_time = time.perf_counter() - start
        return result


def label_agreement(ours: list[ProblemResult], reference: list[ProblemResult]) -> tuple[float, int, int]:
    """Fraction of mismatches (problem, position, draft token, target token) labelled the same by both,
    over the union of the two sets; returns (agreement, agreeing, union size)."""

    def keyed(results):
        return {(r.problem.problem_id, m.position, m.draft_token, m.target_token): m.important
                for r in results for m in r.records}

    a, b = keyed(ours), keyed(reference)
    union = set(a) | set(b)
    same = sum(1 for k in union if k in a and k in b and a[k] == b[k])
    return (same / len(union) if union else 1.0), same, len(union)
