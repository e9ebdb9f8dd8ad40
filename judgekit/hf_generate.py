"""judgekit's decoder behind transformers' ``model.generate(custom_generate=...)``.

transformers 5 calls ``custom_generate`` in two ways (transformers/generation/utils.py, ``generate``):

* a **callable** is called as a decoding method, ``fn(model, input_ids, logits_processor=..., stopping_criteria=...,
  generation_config=..., **model_kwargs)``, after generate has prepared the config; keyword arguments of
  ``generate`` that are parameters of ``fn`` (and not of ``_sample``) are handed to it (``judge=``, ``rule=``).
  It does *not* hand over ``assistant_model`` (a named parameter of generate), so pass the draft as
  ``draft_model=`` there:  ``model.generate(**inputs, custom_generate=judgekit.custom_generate,
  draft_model=draft, judge="judges/j", tokenizer=tok)``.
* a **directory** holding ``custom_generate/generate.py`` (written by :func:`write_custom_generate_dir`, e.g.
  next to a judge) is loaded with ``trust_remote_code=True`` and its ``generate(model, **all_generate_arguments)``
  is called before any preparation: ``model.generate(**inputs, assistant_model=draft, custom_generate=DIR,
  trust_remote_code=True, judge=..., rule=...)``.

Both return what ``generate`` returns: the sequences ``[batch, prompt + new]`` (right-padded with the pad id),
or a ``GenerateDecoderOnlyOutput`` with ``return_dict_in_generate=True``. Greedy output equals
``judgekit generate`` (tested). Only the sampling settings judgekit's rules are defined on are honoured
(temperature, top-k, top-p, max_new_tokens / max_length, stop_strings); others are refused, not ignored.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from judgekit.errors import JudgekitError

# generation-config fields whose non-default value judgekit's decoder cannot honour
_UNSUPPORTED = {"num_beams": 1, "num_return_sequences": 1, "repetition_penalty": 1.0, "no_repeat_ngram_size": 0,
                "min_new_tokens": None, "min_length": 0}

GENERATE_PY = '''"""transformers custom_generate entry point: runs judgekit's speculative decoder (judgekit.hf_generate)."""

from judgekit.hf_generate import generate_from_arguments


def generate(model, **kwargs):
    return generate_from_arguments(model, **kwargs)
'''


def write_custom_generate_dir(path: str | Path) -> Path:
    """Write ``path/custom_generate/generate.py`` (and its requirements.txt), the directory form transformers
    loads with ``custom_generate=path, trust_remote_code=True``; ``judgekit export --format hf`` calls this."""
    folder = Path(path) / "custom_generate"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "generate.py").write_text(GENERATE_PY)
    (folder / "requirements.txt").write_text("judgekit\n")
    return folder


def _rule(rule: Any, judge: Any, rule_params: dict | None):
    """A Rule from a Rule, a rule name and parameters, or just a judge (directory or loaded)."""
    from judgekit.decode.rules import Rule, make_rule

    params = dict(rule_params or {})
    if isinstance(rule, Rule):
        if judge is not None or params:
            raise JudgekitError("give rule= as a Rule, or a rule name with judge= / rule_params=, not both")
        return rule
    name = rule or ("judge" if judge is not None else "lossless")
    if name == "judge":
        from judgekit.evaluate.sweep import resolve_threshold
        from judgekit.judge.head import load_judge

        if judge is None:
            raise JudgekitError("rule 'judge' needs judge= (a trained judge directory or a loaded judge)")
        judge = load_judge(judge) if isinstance(judge, (str, Path)) else judge
        params.update(judge=judge, threshold=resolve_threshold(judge, params.pop("threshold", 0.5)))
    return make_rule(name, **params)


def _sampling(config):
    from judgekit.decode.sampling import SamplingConfig

    for key, default in _UNSUPPORTED.items():
        value = getattr(config, key, default)
        if value is not None and value != default:
            raise JudgekitError(f"judgekit's custom_generate does not support {key}={value!r}")
    if not config.do_sample:
        return SamplingConfig()
    return SamplingConfig(float(config.temperature or 1.0), config.top_k or None,
                          config.top_p if config.top_p not in (None, 1.0) else None)


def speculative_generate(model, input_ids, attention_mask, generation_config, draft_model, tokenizer=None, *,
                         rule: Any = None, judge: Any = None, rule_params: dict | None = None, block_size: int = 8,
                         seed: int = 0):
    """Decode each row of ``input_ids`` (left or right padded; ``attention_mask`` says which ids are real) with
    judgekit's SpeculativeDecoder; returns (sequences, generations)."""
    import torch

    from judgekit.decode.decoder import SpeculativeDecoder
    from judgekit.judge.head import bind_rule
    from judgekit.models import ModelPair, input_device, shared_vocab_size

    if draft_model is None:
        raise JudgekitError("judgekit's custom_generate needs the draft model: assistant_model= (directory form) "
                            "or draft_model= (callable form)")
    if tokenizer is None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model.name_or_path)
    if input_ids.dim() == 1:
        input_ids = input_ids[None]
    mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
    prompts = [row[m.bool()].tolist() for row, m in zip(input_ids, mask)]
    if generation_config.max_new_tokens is not None:
        budget = int(generation_config.max_new_tokens)
    else:
        budget = int(generation_config.max_length) - input_ids.shape[1]
    pair = ModelPair(model, draft_model, tokenizer, str(model.name_or_path), str(draft_model.name_or_path),
                     shared_vocab_size(model, draft_model, tokenizer), input_device(model))
    decoder = SpeculativeDecoder(pair, bind_rule(_rule(rule, judge, rule_params), pair), block_size,
                                 _sampling(generation_config))
    stops = generation_config.stop_strings or ()
    stops = (stops,) if isinstance(stops, str) else tuple(stops)
    gens = decoder.generate_batch(prompts, budget, stops, seeds=[seed + i for i in range(len(prompts))])
    pad = generation_config.pad_token_id
    pad = pad if pad is not None else (tokenizer.pad_token_id if tokenizer.pad_token_id is not None else
                                       sorted(decoder.eos)[0])
    pad = pad[0] if isinstance(pad, (list, tuple)) else pad
    rows = [input_ids[i].tolist() + g.token_ids for i, g in enumerate(gens)]
    width = max(len(r) for r in rows)
    sequences = torch.tensor([r + [int(pad)] * (width - len(r)) for r in rows], device=input_ids.device)
    return sequences, gens


def _result(sequences, generation_config):
    if generation_config.return_dict_in_generate:
        from transformers.generation.utils import GenerateDecoderOnlyOutput

        return GenerateDecoderOnlyOutput(sequences=sequences)
    return sequences


def custom_generate(model, input_ids, logits_processor=None, stopping_criteria=None, generation_config=None,
                    draft_model=None, assistant_model=None, tokenizer=None, rule=None, judge=None,
                    rule_params=None, block_size: int = 8, seed: int = 0, **model_kwargs):
    """The callable form: ``model.generate(**inputs, custom_generate=judgekit.custom_generate, draft_model=draft,
    judge=..., rule=..., tokenizer=tok)``. The processors generate prepared from the config are not used: the
    decoder applies temperature / top-k / top-p itself, to both models, as the rules require."""
    config = generation_config or model.generation_config
    sequences, _ = speculative_generate(model, input_ids, model_kwargs.get("attention_mask"), config,
                                        draft_model if draft_model is not None else assistant_model, tokenizer,
                                        rule=rule, judge=judge, rule_params=rule_params, block_size=block_size,
                                        seed=seed)
    return _result(sequences, config)


def generate_from_arguments(model, inputs=None, generation_config=None, assistant_model=None, tokenizer=None,
                            rule=None, judge=None, rule_params=None, block_size: int = 8, seed: int = 0,
                            draft_model=None, **kwargs):
    """The directory form's entry point: every argument of ``generate`` as the caller gave it (``max_new_tokens``,
    ``do_sample``, ... still loose in ``kwargs``, applied to a copy of the model's generation config here)."""
    config = copy.deepcopy(generation_config or model.generation_config)
    ignored = {"logits_processor", "stopping_criteria", "prefix_allowed_tokens_fn", "synced_gpus", "streamer",
               "negative_prompt_ids", "negative_prompt_attention_mask"}
    given = {k: v for k, v in kwargs.items() if k in ignored and v is not None}
    if given:
        raise JudgekitError(f"judgekit's custom_generate does not support {', '.join(sorted(given))}")
    input_ids = inputs if inputs is not None else kwargs.pop("input_ids", None)
    attention_mask = kwargs.pop("attention_mask", None)
    unused = config.update(**{k: v for k, v in kwargs.items() if k not in ignored})
    if unused:
        raise JudgekitError(f"unknown generate arguments for judgekit's custom_generate: {', '.join(sorted(unused))}")
    sequences, _ = speculative_generate(model, input_ids, attention_mask, config,
                                        draft_model if draft_model is not None else assistant_model, tokenizer,
                                        rule=rule, judge=judge, rule_params=rule_params, block_size=block_size,
                                        seed=seed)
    return _result(sequences, config)
