"""A KV-cached speculative decoder whose verification rule is a parameter.

One decoding step drafts k tokens with the draft model (k one-token forwards, tokens stay on the device),
verifies them with one target forward that also yields the hidden states the judge reads, applies the
rule to the whole block at once (:func:`judgekit.decode.rules.verify_block`), and syncs with the host exactly once
to learn how many tokens were accepted. Rolling back a cache is a length change (``Cache.crop(-n)`` in
transformers 5, which for a static cache only moves its write pointer), so a preallocated cache and
CUDA-graph replay of the draft and verify forwards can be slotted in later without touching this loop.

Cache invariant between steps: each model's cache holds the committed sequence except tokens it has not
read yet (at least the last one); the next forward feeds exactly the unread suffix.
"""

from __future__ import annotations

import time
import weakref


import torch
from torch import Tensor
from transformers import DynamicCache

from judgekit.errors import JudgekitError
from judgekit.models import ModelPair, cache_arg, encode_prompt, format_prompt
from judgekit.decode.generation import Generation, GenerationStats, StopScanner, eos_ids
from judgekit.decode.rules import Rule, RuleContext, sample
from judgekit.decode.sampling import SamplingConfig, to_probs
from judgekit.decode.verify import verify_block


def judge_features(rule: Rule, hidden_layer: int | None = None) -> tuple[int, bool]:
    """(target hidden-state layer, whether the draft's hidden state is needed) for a rule's judge, if any."""
    judge = getattr(rule, "judge", None)
    config = getattr(judge, "config", None) or {}
    layer = int(config.get("layer", -1)) if hidden_layer is None else hidden_layer
    return layer, config.get("features", "target") == "target+draft"


def _fast_models(pair: ModelPair, fast: bool | str, compile: bool):
    """(target, draft) fast forwards, or None for the eager transformers path.

    "auto" takes the fast path when both models support it; True insists (a clear error otherwise)."""
    from judgekit.decode.fastmodel import fast_unsupported

    if fast not in (True, False, "auto"):
        raise JudgekitError(f"fast must be True, False or 'auto', got {fast!r}")
    if fast is False:
        return None
    reasons = [r for r in (fast_unsupported(pair.target), fast_unsupported(pair.draft)) if r]
    if reasons:
        if fast is True:
            raise JudgekitError(f"no fast path for this pair: {reasons[0]}")
        return None
    return _fast_lm(pair.target, compile), _fast_lm(pair.draft, compile)


# A FastLM holds fused copies of the projection weights: build one per (model, compile) and share it between
# decoders, so a sweep of many rules (one decoder each) neither re-fuses a 7B model per point nor holds two copies.
_FAST_LMS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _fast_lm(model, compile: bool):
    from judgekit.decode.fastmodel import FastLM

    # In-place updates of the weights (training, perturbation) bump tensor versions: rebuild then.
    version = (tuple(p.data_ptr() for p in model.parameters()), sum(p._version for p in model.parameters()))
    per_model = _FAST_LMS.setdefault(model, {})
    cached = per_model.get(compile)
    if cached is None or cached[0] != version:
        per_model[compile] = cached = (version, FastLM(model, compile=compile))
    return cached[1]


class SpeculativeDecoder:
    """Speculative decoding with any rule of :mod:`judgekit.decode.rules`; prompts are processed one at a time."""

    def __init__(self, pair: ModelPair, rule: Rule, block_size: int = 8,
                 sampling: SamplingConfig | None = None, hidden_layer: int | None = None,
                 fast: bool | str = "auto", compile: bool = False, cuda_graphs: bool = False):
        if block_size < 1:
            raise JudgekitError(f"block size must be >= 1, got {block_size}")
        self.pair = pair
        self.rule = rule
        self.gamma = block_size
        self.sampling = sampling or SamplingConfig()
        # A trained judge says which hidden-state layer it reads and whether it needs the draft's state too;
        # every caller (generate, evaluate_rule, ...) gets this right by construction. hidden_layer overrides.
        self.hidden_layer, self.need_draft_hidden = judge_features(rule, hidden_layer)
        self.need_shape = bool(getattr(rule, "needs_shape", False))
        self.eos = eos_ids(pair)
        self._target_cache, self._draft_cache = cache_arg(pair.target), cache_arg(pair.draft)
        self._fast = _fast_models(pair, fast, compile)
        self._step = None  # the fast path's step forwards, when they replay CUDA graphs
        if cuda_graphs:
            if compile:
                raise JudgekitError("use either compile or cuda_graphs: a graph captures the plain forward")
            if self._fast is None or pair.device.type != "cuda":
                raise JudgekitError("CUDA graphs need the fast path on a CUDA device")
            from judgekit.decode.cudagraphs import GraphedLM

            self._step = (GraphedLM(self._fast[0]), GraphedLM(self._fast[1]))

    @property
    def fast(self) -> bool:
        """Whether decoding runs on the static-cache fast path (:mod:`judgekit.decode.fastmodel`)."""
        return self._fast is not None

    def generate_batch(self, prompt_ids: list[list[int]], max_new_tokens: int = 128,
                       stop_strings: tuple[str, ...] = (), seeds: list[int] | None = None,
                       prompts: list[str] | None = None, batch_size: int | None = None,
                       on_finish=None) -> list[Generation]:
        """Decode several prompts together (up to ``batch_size`` sequences in lockstep on the fast path, a
        finished one's place taken by the next prompt; one at a time on the eager path). Greedy outputs equal those of :meth:`generate_ids`; each Generation's stats carry
        its share of the batch's wall time, so merged stats give the aggregate tokens/s. ``on_finish(i, gen)``
        is called as soon as prompt i is done (in completion order on the fast path)."""
        if max_new_tokens < 1:
            raise JudgekitError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if not prompt_ids:
            return []
        if any(not ids for ids in prompt_ids):
            raise JudgekitError("a prompt has zero tokens")
        seeds = list(seeds) if seeds is not None else list(range(len(prompt_ids)))
        names = list(prompts) if prompts is not None else [""] * len(prompt_ids)
        if self._fast is None:
            out = []
            for i, (ids, s, name) in enumerate(zip(prompt_ids, seeds, names)):
                out.append(self._generate_eager(ids, max_new_tokens, stop_strings, s, name))
                if on_finish is not None:
                    on_finish(i, out[-1])
            return out
        from judgekit.decode.fastdecode import generate_batch_fast

        with torch.inference_mode():
            return generate_batch_fast(self, *self._fast, prompt_ids, max_new_tokens, tuple(stop_strings),
                                       seeds, names, batch_size, on_finish)

    # -- public API --------------------------------------------------------------------------------------
    def generate(self, prompts: list[str], max_new_tokens: int = 128, stop_strings: tuple[str, ...] = (),
                 seed: int = 0, chat_template: bool = True) -> list[Generation]:
        out = []
        for i, text in enumerate(prompts):
            formatted = format_prompt(self.pair.tokenizer, text, chat_template)
            ids = encode_prompt(self.pair.tokenizer, formatted)
            out.append(self.generate_ids(ids, max_new_tokens, stop_strings, seed + i, prompt=text))
        return out

    def generate_ids(self, prompt_ids: list[int], max_new_tokens: int = 128,
                     stop_strings: tuple[str, ...] = (), seed: int = 0, prompt: str = "") -> Generation:
        if self._fast is not None:
            return self.generate_batch([list(prompt_ids)], max_new_tokens, stop_strings, [seed], [prompt])[0]
        return self._generate_eager(prompt_ids, max_new_tokens, stop_strings, seed, prompt)

    @torch.inference_mode()
    def _generate_eager(self, prompt_ids: list[int], max_new_tokens: int = 128,
                        stop_strings: tuple[str, ...] = (), seed: int = 0, prompt: str = "") -> Generation:
        if max_new_tokens < 1:
            raise JudgekitError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        pair, dev = self.pair, self.pair.device
        generator = torch.Generator(device=dev).manual_seed(seed)
        scanner = StopScanner(pair.tokenizer, tuple(stop_strings))
        stats = GenerationStats(accept_hist=[0] * (self.gamma + 1))
        t_cache = DynamicCache(config=pair.target.config)
        d_cache = DynamicCache(config=pair.draft.config)
        seq = list(prompt_ids)
        n_prompt = len(seq)
        t_len = d_len = 0  # tokens held by each cache
        finish = "length"
        start = time.perf_counter()
        while len(seq) - n_prompt < max_new_tokens:
            remaining = max_new_tokens - (len(seq) - n_prompt)
            k = min(self.gamma, remaining - 1)  # never draft past the budget
            drafted, q, q_shape, d_hidden = self._draft(seq[d_len:], d_cache, k, generator)
            stats.draft_calls += k
            p, p_shape, hidden = self._verify(seq[t_len:], drafted, t_cache)
            stats.target_calls += 1
            ctx = RuleContext(p_shape=p_shape, q_shape=q_shape, hidden=hidden, draft_hidden=d_hidden)
            res = verify_block(self.rule, p, q, drafted, ctx, generator, greedy=self.sampling.greedy)
            # The one host sync of the step: accepted length, emitted token and the drafted ids together.
            packed = torch.cat([res.n_accepted.view(1), res.next_token.view(1), drafted]).tolist()
            n, emitted = packed[0], packed[2:2 + packed[0]] + [packed[1]]
            stats.accept_hist[n] += 1
            base = len(seq)
            # Roll back: the target read seq + k drafts and keeps seq + n; the draft read seq + (k - 1) drafts.
            if k - n > 0:
                t_cache.crop(-(k - n))
            t_len = base + n
            if k > 0:
                d_keep = min(n, k - 1)
                if k - 1 - d_keep > 0:
                    d_cache.crop(-(k - 1 - d_keep))
                d_len = base + d_keep
            seq.extend(emitted)
            cut, finish = self._finish(seq, n_prompt, base, scanner)
            if cut is not None:
                del seq[cut:]
                break
        stats.wall_time = time.perf_counter() - start
        completion = seq[n_prompt:]
        stats.new_tokens = len(completion)
        text = pair.tokenizer.decode(completion, skip_special_tokens=True)
        return Generation(prompt, text, completion, stats, finish)

    # -- the two forwards ----------------------------------------------------------------------------------
    def _draft(self, unread: list[int], cache, k: int, generator
               ) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
        """k drafted tokens, their rows q, the shape rows, and (for a target+draft judge) the draft's final
        hidden state that proposed each token: the miner's ``draft_hidden`` feature, same position and layer."""
        dev, vocab = self.pair.device, self.pair.vocab_size
        if k == 0:
            empty = torch.empty(0, vocab, device=dev)
            d_hidden = (torch.empty(0, self.pair.draft.config.hidden_size, device=dev)
                        if self.need_draft_hidden else None)
            return torch.empty(0, dtype=torch.long, device=dev), empty, None, d_hidden
        inp = torch.tensor([unread], device=dev)
        tokens, rows, shapes, states = [], [], [], []
        for _ in range(k):
            out = self.pair.draft(input_ids=inp, **{self._draft_cache: cache}, use_cache=True, logits_to_keep=1,
                                  output_hidden_states=self.need_draft_hidden)
            logits = out.logits[0, -1, :vocab]
            if self.need_draft_hidden:
                states.append(out.hidden_states[-1][0, -1])
            probs, shape = to_probs(logits, self.sampling, self.need_shape)
            # Same exponential-race sampler as verification; greedy rows are one-hot so this is the argmax.
            tok = probs.argmax(-1) if self.sampling.greedy else sample(probs.unsqueeze(0), generator)[0]
            tokens.append(tok)
            rows.append(probs)
            shapes.append(shape)
            inp = tok.view(1, 1)
        q_shape = torch.stack(shapes) if shapes[0] is not None else None
        return torch.stack(tokens), torch.stack(rows), q_shape, (torch.stack(states) if states else None)

    def _verify(self, unread: list[int], drafted: Tensor, cache) -> tuple[Tensor, Tensor | None, Tensor | None]:
        dev, vocab = self.pair.device, self.pair.vocab_size
        k = drafted.shape[0]
        inp = torch.cat([torch.tensor(unread, device=dev), drafted]).view(1, -1)
        out = self.pair.target(input_ids=inp, **{self._target_cache: cache}, use_cache=True, logits_to_keep=k + 1,
                               output_hidden_states=self.rule.needs_hidden)
        p, p_shape = to_probs(out.logits[0, -(k + 1):, :vocab], self.sampling, self.need_shape)
        hidden = out.hidden_states[self.hidden_layer][0, inp.shape[1] - k:] if self.rule.needs_hidden else None
        return p, p_shape, hidden

    def _finish(self, seq: list[int], n_prompt: int, base: int, scanner: StopScanner) -> tuple[int | None, str]:
        """Where to cut the sequence after this step's tokens (EOS or stop string), and why."""
        completion = seq[n_prompt:]
        first_new = base - n_prompt
        for j in range(first_new, len(completion)):
            if completion[j] in self.eos:
                hit = scanner.first_hit(completion[: j + 1], first_new)
                return (n_prompt + hit + 1, "stop") if hit is not None else (n_prompt + j + 1, "eos")
        hit = scanner.first_hit(completion, first_new)
        if hit is not None:
            return n_prompt + hit + 1, "stop"
        return None, "length"
