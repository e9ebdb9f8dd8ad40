"""judgekit: judge-based lossy speculative decoding and the paper's unified lossy verification rules.

The public Python API (docs/api.md has worked examples). Every name is imported on first use (PEP 562), so
``import judgekit`` and ``judgekit --help`` stay torch-free; nothing inside the package imports this module
(tests/test_layers.py would see the cycle), its parts import each other directly.

    pair = judgekit.load_model_pair("pocket-target", "pocket-draft")
    rule = judgekit.make_rule("lenience", lenience=0.5)
    gens = judgekit.SpeculativeDecoder(pair, rule, block_size=8).generate(["What is 2+3?"])
"""

from __future__ import annotations

import importlib
from typing import Any

from judgekit._version import __version__

# public name -> "module:attribute" (the attribute defaults to the public name)
_EXPORTS: dict[str, str] = {
    # models
    "load_model_pair": "judgekit.models",
    "load_tokenizer": "judgekit.models",
    "LoadOptions": "judgekit.models",
    "ModelPair": "judgekit.models",
    # rules and decoding
    "make_rule": "judgekit.decode.rules",
    "RULES": "judgekit.decode.rules",
    "SpeculativeDecoder": "judgekit.decode.decoder",
    "SamplingConfig": "judgekit.decode.sampling",
    "Generation": "judgekit.decode.generation",
    # judges
    "load_judge": "judgekit.judge.head",
    "bind_rule": "judgekit.judge.head",
    "TrainConfig": "judgekit.judge.train",
    "train_judge": "judgekit.judge.train:train_one",
    "prepare_judge_data": "judgekit.judge.data:prepare",
    "select_judge_data": "judgekit.judge.data:select",
    "build_judge_data": "judgekit.judge.data:build_data",
    # tasks, mining, evaluation
    "get_task": "judgekit.tasks",
    "task_names": "judgekit.tasks",
    "MineConfig": "judgekit.mine.miner",
    "mine_to_dir": "judgekit.mine.miner",
    # `evaluate` is also the subpackage's name, which an import of it binds on the package: hence _rules
    "evaluate_rules": "judgekit.evaluate.job:evaluate",
    # transformers integration and provenance
    "custom_generate": "judgekit.hf_generate",
    "write_custom_generate_dir": "judgekit.hf_generate",
    # `provenance` is also the submodule's name, which an import of it binds on the package: hence get_
    "get_provenance": "judgekit.provenance:provenance",
    "JudgekitError": "judgekit.errors",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    target = _EXPORTS.get(name)
    if target is None:
        raise AttributeError(f"module 'judgekit' has no attribute {name!r}")
    module, _, attr = target.partition(":")
    value = getattr(importlib.import_module(module), attr or name)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
