"""Argument declarations shared by several commands, so each flag means the same thing everywhere.

Only argparse here: `judgekit --help` builds every parser and must not import torch.
"""

from __future__ import annotations

import argparse


DTYPE_CHOICES = ["auto", "bf16", "fp16", "fp32"]


def add_model_args(p, *, required: bool = True, target: str | None = None, draft: str | None = None,
                   note: str = "", device: bool = True, loading: bool = False) -> None:
    """--target and --draft (with --device and --dtype unless ``device`` is False) on a parser or group.

    ``required``: both must be given; ``target``/``draft``: their defaults (e.g. the pocket pair);
    ``note``: appended to both helps (how the pair combines with the command's other flags);
    ``loading``: also --revision, --trust-remote-code and --device-map (:func:`add_loading_args`).
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
    if loading:
        add_loading_args(p)


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


# ---------------------------------------------------------------------------------------------- model loading

DEVICE_MAP_CHOICES = ["auto", "balanced", "balanced_low_0", "sequential"]  # judgekit.models.DEVICE_MAPS


def add_loading_args(p) -> None:
    """How the pair is fetched and placed (judgekit.models.LoadOptions); every default is None so that a config
    file's value holds in `judgekit eval`."""
    p.add_argument("--revision", default=None, help="hub branch, tag or commit of the target (hub ids only)")
    p.add_argument("--draft-revision", default=None, help="hub branch, tag or commit of the draft")
    p.add_argument("--trust-remote-code", action="store_true", default=None,
                   help="run the checkpoints' own modelling code (some hub models need it)")
    p.add_argument("--device-map", default=None, choices=DEVICE_MAP_CHOICES,
                   help="shard the target over the visible GPUs (or offload it) with accelerate; the draft joins "
                        "the target's first device. Quantised checkpoints (GPTQ, AWQ, ...) load as they are")


def loading_options(values) -> dict:
    """load_model_pair's target_options / draft_options from parsed args or a settings dict."""
    from judgekit.models import LoadOptions

    get = values.get if isinstance(values, dict) else (lambda k: getattr(values, k, None))
    trust = bool(get("trust_remote_code"))
    return {"target_options": LoadOptions(get("revision"), trust, get("device_map")),
            "draft_options": LoadOptions(get("draft_revision"), trust)}
