"""Task registry: name -> plug-in class, imported lazily so a task's optional dependencies load only when used."""

from __future__ import annotations

import importlib
import inspect

from judgekit.errors import JudgekitError
from judgekit.tasks.base import Outcome, Problem, Task

# name -> "module:Class"; lazy so that e.g. evalplus is imported only for the tasks that need it.
_REGISTRY: dict[str, str] = {
    "gsm8k": "judgekit.tasks.gsm8k:GSM8K",
    "livecodebench": "judgekit.tasks.livecodebench:LiveCodeBench",
    "math500": "judgekit.tasks.math500:Math500",
    "humaneval": "judgekit.tasks.humaneval:HumanEval",
    "humaneval+": "judgekit.tasks.evalplus_tasks:HumanEvalPlus",
    "mbpp+": "judgekit.tasks.evalplus_tasks:MBPPPlus",
    "pocket-math": "judgekit.tasks.pocket_math:PocketMath",
    "pocket-math-hard": "judgekit.tasks.pocket_math:PocketMathHard",
    "pocket-code": "judgekit.tasks.pocket_code:PocketCode",
    "bfcl": "judgekit.tasks.bfcl:BFCL",
    "include": "judgekit.tasks.include:Include",
}


def task_names() -> list[str]:
    return list(_REGISTRY)


def get_task(name: str, **kwargs) -> Task:
    """The task plug-in `name`, built with its options (`kwargs`: e.g. subset, language); an option the task
    does not take is one clear error rather than a TypeError."""
    if name not in _REGISTRY:
        raise JudgekitError(f"unknown task {name!r}; known tasks: {', '.join(_REGISTRY)}")
    module_name, cls_name = _REGISTRY[name].split(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    params = inspect.signature(cls).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        unknown = [k for k in kwargs if k not in params]
        if unknown:
            shown = ", ".join(f"{k!r} (--{k.replace('_', '-')})" for k in unknown)
            raise JudgekitError(f"task {name} takes no option {shown}")
    return cls(**kwargs)


__all__ = ["Outcome", "Problem", "Task", "get_task", "task_names"]
