"""Argument declarations shared by several commands, so each flag means the same thing everywhere.

Only argparse here: `judgekit --help` builds every parser and must not import torch.
"""

from __future__ import annotations

import argparse


DTYPE_CHOICES = ["auto", "bf16", "fp16", "fp32"]


def add_model_args(p, *, required: bool = True, target: str | None = None, draft: str | None = None,
                   note: str = "", device: bool = True) -> None:
    """--target and --draft (with --device and --dtype unless ``device`` is False) on a parser or group.

    ``required``: both must be given; ``target``/``draft``: their defaults (e.g. the pocket pair);
    ``note``: appended to both helps (how the pair combines with the command's other flags).
    """
    for flag, default, alias in (("--target", target, "pocket-target"), ("--draft", draft, "pocket-draft")):
        text = f"{flag[2:]} model: hub id, local directory or {alias}"
        if default is not None:
            text += f" (default {default})"
        p.add_argument(flag, required=required, default=default, help=text + (f"; {note}" if note else ""))
    if device:
        p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:1, ...")
        p.add_argument("--dtype", default="auto", choices=DTYPE_CHOICES,
                       help="weights' dtype (auto: bf16 or fp16 on CUDA, fp32 on CPU)")


# Task options: flag -> keyword of the task's constructor (`get_task(name, **task_options(...))`).
TASK_OPTION_KEYS = ("subset", "language", "per_language")


def add_task_args(p) -> None:
    """--subset, --language and --per-language: options of the tasks that have them (bfcl, include); a task
    without the option refuses it. Every default is None (not given), so a config file can set them."""
    p.add_argument("--subset", help="task subset: bfcl category (default parallel_multiple; also simple_python, "
                                    "multiple, parallel, live_*) or include base|lite")
    p.add_argument("--language", help="include: all (default) or a comma list of languages, e.g. German,Greek")
    p.add_argument("--per-language", type=int, help="include: first N problems of each language")


def task_options(values) -> dict:
    """The task options given (a namespace or a settings dict), for `get_task(name, **options)`."""
    get = values.get if isinstance(values, dict) else lambda k: getattr(values, k, None)
    return {k: get(k) for k in TASK_OPTION_KEYS if get(k) is not None}


def comma_list(kind):
    """argparse type for a sweep: "0.2,0.4" -> [0.2, 0.4] (`kind` converts each item)."""

    def parse(text: str) -> list:
        try:
            items = [kind(x.strip()) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}") from None
        if not items:
            raise argparse.ArgumentTypeError(f"expected at least one value, got {text!r}")
        return items

    return parse


def threshold_value(text: str) -> float | str:
    """A judge threshold: a probability, or the name of one saved in the judge (p10..p90, recall90, ...)."""
    try:
        return float(text)
    except ValueError:
        return text


def add_rule_args(p: argparse.ArgumentParser, sweep: bool = False) -> None:
    """Rule flags. With ``sweep`` (judgekit eval) --rule/--judge take several values, the numeric parameters
    comma-separated lists, and every default is None so that a config file can fill what the line leaves out."""
    g = p.add_argument_group("acceptance rule")

    def arg(flag, kind, default, **kw):
        if sweep:
            g.add_argument(flag, type=comma_list(kind), default=None, **kw)
        else:
            g.add_argument(flag, type=kind, default=default, **kw)

    g.add_argument("--rule", nargs="+" if sweep else None,  # names not listed: that would import torch for --help
                   default=None if sweep else "lossless",
                   help="verification rule (default lossless; an unknown name lists them all)"
                        + ("; several for a comparison" if sweep else ""))
    arg("--lenience", float, 0.5, help="lenience l in (0, 1] (rule lenience)")
    arg("--lam", float, 0.5,
        help="interpolation lambda: [0, 1] for rule cos, (0, 1] for cos-adaptive and cos-ceiling")
    arg("--fuzzy-threshold", float, 0.5, help="divergence threshold T (rule fuzzy)")
    if sweep:
        arg("--divergence", str, "kl", help="D for rule fuzzy: kl, tv or js")
    else:
        g.add_argument("--divergence", default="kl", choices=["kl", "tv", "js"], help="D for rule fuzzy")
    g.add_argument("--judge", nargs="+" if sweep else None, help="trained judge directory (rule judge)")
    arg("--judge-threshold", threshold_value, 0.5,
        help="accept if P(important) < this; a number or a threshold saved in the judge (p10..p90, recall90)")
    arg("--p-base", float, 0.1, help="min-p base (rules speccascade, minp)")
    arg("--epsilon", float, 0.0009, help="eta-sampling epsilon (rules typical, eta)")
    arg("--delta", float, 0.03, help="eta-sampling delta (rules typical, eta)")


def add_sampling_args(p: argparse.ArgumentParser, sweep: bool = False) -> None:
    """Decoding flags; with ``sweep`` block size and temperature take comma lists, --seeds several values and
    the defaults are None (filled from a config file or the built-in defaults)."""
    g = p.add_argument_group("decoding")
    if sweep:
        g.add_argument("--block-size", type=comma_list(int), help="draft tokens per step (gamma), e.g. 4,8")
        g.add_argument("--temperature", type=comma_list(float), help="0 = greedy; e.g. 0,1.0 for both")
        g.add_argument("--seeds", type=int, nargs="+", help="sampling seeds (greedy points use the first)")
    else:
        g.add_argument("--block-size", type=int, default=8, help="draft tokens per step (gamma)")
        g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    g.add_argument("--top-k", type=int)
    g.add_argument("--top-p", type=float)
    g.add_argument("--max-new-tokens", type=int, default=None if sweep else 256,
                   help="same default as evaluation and mining (judgekit eval, judgekit mine)")
    if not sweep:
        g.add_argument("--seed", type=int, default=0)
    g.add_argument("--no-chat-template", action="store_true", default=None if sweep else False,
                   help="feed the prompt text as is")
