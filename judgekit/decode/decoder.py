"""A speculative decoder whose verification rule is a parameter: the public entry point of decoding.

It chooses a KV-rows backend once (:mod:`judgekit.decode.backends`: the static-cache forward on Llama / Qwen2
pairs, transformers caches for any other architecture), builds a :class:`judgekit.decode.engine.ModelDrafter`
on the draft's rows, and runs every request — one prompt or many, batch 1 or batch B — through the one
continuous-batching driver (:func:`judgekit.decode.driver.decode_batch`) around the one speculative step
(:func:`judgekit.decode.engine.speculative_step`). The backends differ only in how a forward reaches its
cache, so greedy outputs, sampling draws and judge features are the same on both (tested).
"""

from __future__ import annotations

import torch

from judgekit.decode.backends import fast_models, make_rows
from judgekit.decode.driver import decode_batch
from judgekit.decode.engine import ModelDrafter, StepConfig
from judgekit.decode.generation import Generation, eos_ids
from judgekit.decode.rules import Rule
from judgekit.decode.sampling import SamplingConfig
from judgekit.decode.tree import TreeSpec, parse_tree
from judgekit.decode.tree_verify import check_tree_rule
from judgekit.decode.treedecode import TreeDrafter
from judgekit.errors import JudgekitError
from judgekit.models import ModelPair, encode_prompt, format_prompt


def judge_features(rule: Rule, hidden_layer: int | None = None) -> tuple[int, bool]:
    """(target hidden-state layer, whether the draft's hidden state is needed) for a rule's judge, if any."""
    judge = getattr(rule, "judge", None)
    config = getattr(judge, "config", None) or {}
    layer = int(config.get("layer", -1)) if hidden_layer is None else hidden_layer
    return layer, config.get("features", "target") == "target+draft"


class SpeculativeDecoder:
    """Speculative decoding with any rule of :mod:`judgekit.decode.rules`, up to ``batch_size`` prompts in
    flight on either backend (``fast="auto"|True|False``)."""

    def __init__(self, pair: ModelPair, rule: Rule, block_size: int = 8,
                 sampling: SamplingConfig | None = None, hidden_layer: int | None = None,
                 fast: bool | str = "auto", compile: bool = False, cuda_graphs: bool = False,
                 tree: str | TreeSpec | None = None):
        if block_size < 1:
            raise JudgekitError(f"block size must be >= 1, got {block_size}")
        self.pair = pair
        self.rule = rule
        self.gamma = block_size
        self.sampling = sampling or SamplingConfig()
        # A trained judge says which hidden-state layer it reads and whether it needs the draft's state too;
        # every caller (generate, eval, the miner) gets this right by construction. hidden_layer overrides.
        self.hidden_layer, self.need_draft_hidden = judge_features(rule, hidden_layer)
        self.need_shape = bool(getattr(rule, "needs_shape", False))
        self.eos = eos_ids(pair)
        # A draft tree (docs/design.md §2.1) replaces the chain drafter; its depth is the block size.
        self.tree = parse_tree(tree) if isinstance(tree, str) else tree
        if self.tree is not None:
            check_tree_rule(rule)
            self.gamma = self.tree.depth
        self._fast = fast_models(pair, fast, compile)
        self.graphs = None  # (target, draft) GraphedLM replaying the static backend's decoding steps
        if cuda_graphs:
            if compile:
                raise JudgekitError("use either compile or cuda_graphs: a graph captures the plain forward")
            if self._fast is None or pair.device.type != "cuda":
                raise JudgekitError("CUDA graphs need the fast path on a CUDA device")
            from judgekit.decode.cudagraphs import GraphedLM

            self.graphs = (GraphedLM(self._fast[0]), GraphedLM(self._fast[1]))

    @property
    def fast(self) -> bool:
        """Whether decoding runs on the static-cache backend (:mod:`judgekit.decode.staticrows`)."""
        return self._fast is not None

    def _rows(self, max_len: int):
        """Fresh (target, draft) KV rows on this decoder's backend."""
        pair, vocab = self.pair, self.pair.vocab_size
        lms = self._fast or (None, None)
        graphs = self.graphs or (None, None)
        return (make_rows(pair.target, vocab, lms[0], max_len, graphs[0]),
                make_rows(pair.draft, vocab, lms[1], max_len, graphs[1]))

    def generate_batch(self, prompt_ids: list[list[int]], max_new_tokens: int = 128,
                       stop_strings: tuple[str, ...] = (), seeds: list[int] | None = None,
                       prompts: list[str] | None = None, batch_size: int | None = None,
                       on_finish=None) -> list[Generation]:
        """Decode several prompts, up to ``batch_size`` in lockstep (all if None), a finished one's rows taken
        by the next prompt. Greedy outputs equal those of :meth:`generate_ids`; each Generation's stats carry
        its share of the batch's wall time. ``on_finish(i, gen)`` is called as soon as prompt i is done."""
        if max_new_tokens < 1:
            raise JudgekitError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if batch_size is not None and batch_size < 1:
            raise JudgekitError(f"batch size must be >= 1, got {batch_size}")
        if not prompt_ids:
            return []
        if any(not ids for ids in prompt_ids):
            raise JudgekitError("a prompt has zero tokens")
        seeds = list(seeds) if seeds is not None else list(range(len(prompt_ids)))
        names = list(prompts) if prompts is not None else [""] * len(prompt_ids)
        target, draft = self._rows(max(len(p) for p in prompt_ids) + max_new_tokens + self.gamma + 2
                                 + (self.tree.n_nodes if self.tree is not None else 0))
        if self.tree is not None:
            drafter = TreeDrafter(draft, self.tree, self.sampling, self.need_shape, self.need_draft_hidden,
                                  int(self.pair.draft.config.hidden_size))
        else:
            drafter = ModelDrafter(draft, self.sampling, self.need_shape, self.need_draft_hidden,
                                   int(self.pair.draft.config.hidden_size))
        cfg = StepConfig(self.rule, self.sampling, self.hidden_layer if self.rule.needs_hidden else None,
                         self.need_shape)
        with torch.inference_mode():
            return decode_batch(cfg, target, drafter, prompt_ids, gamma=self.gamma, max_new_tokens=max_new_tokens,
                                tokenizer=self.pair.tokenizer, eos=self.eos, stop_strings=tuple(stop_strings),
                                seeds=seeds, names=names, batch_size=batch_size, device=self.pair.device,
                                on_finish=on_finish)

    def generate(self, prompts: list[str], max_new_tokens: int = 128, stop_strings: tuple[str, ...] = (),
                 seed: int = 0, chat_template: bool = True) -> list[Generation]:
        """Chat-formatted prompts one after another (prompt i seeded ``seed + i``)."""
        out = []
        for i, text in enumerate(prompts):
            formatted = format_prompt(self.pair.tokenizer, text, chat_template)
            ids = encode_prompt(self.pair.tokenizer, formatted)
            out.append(self.generate_ids(ids, max_new_tokens, stop_strings, seed + i, prompt=text))
        return out

    def generate_ids(self, prompt_ids: list[int], max_new_tokens: int = 128,
                     stop_strings: tuple[str, ...] = (), seed: int = 0, prompt: str = "") -> Generation:
        return self.generate_batch([list(prompt_ids)], max_new_tokens, stop_strings, [seed], [prompt])[0]
