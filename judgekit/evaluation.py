"""Decoding a task's problems with one rule and scoring them: block efficiency, tokens/s and quality."""

from __future__ import annotations

from dataclasses import dataclass

from judgekit.decoding import GenerationStats, SamplingConfig, SpeculativeDecoder
from judgekit.models import ModelPair, encode_prompt
from judgekit.rules import Rule
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
