"""`judgekit generate`: speculative decoding of one or more prompts with any acceptance rule."""

from __future__ import annotations

import argparse
import json

from judgekit.errors import JudgekitError


def add_model_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("--target", required=required, help="target model: hub id, local directory or pocket-target")
    p.add_argument("--draft", required=required, help="draft model: hub id, local directory or pocket-draft")
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:1, ...")
    p.add_argument("--dtype", default="auto", choices=["auto", "bf16", "fp16", "fp32"])


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


def build_rule(args, pair=None):
    """The rule named on the command line, with its parameters (a judge is loaded once, here).

    Without a pair this only validates and loads (cheap, before the models); with one, the judge is also
    checked against the pair and moved to its device (:func:`bind_rule`).
    """
    from judgekit.rules import RULES, make_rule

    if args.rule not in RULES:
        raise JudgekitError(f"unknown rule {args.rule!r}; choose from {', '.join(RULES)}")
    params = dict(lenience=args.lenience, lam=args.lam, divergence=args.divergence,
                  p_base=args.p_base, epsilon=args.epsilon, delta=args.delta)
    if args.rule == "fuzzy":
        params["threshold"] = args.fuzzy_threshold
    if args.rule == "judge":
        if not args.judge:
            raise JudgekitError("rule judge needs --judge PATH (a trained judge directory)")
        from judgekit.evaluation import resolve_threshold
        from judgekit.judge import load_judge

        judge = load_judge(args.judge)
        params.update(judge=judge, threshold=resolve_threshold(judge, args.judge_threshold))
    rule = make_rule(args.rule, **params)
    return bind_rule(rule, pair) if pair is not None else rule


def bind_rule(rule, pair):
    """A judge rule's judge checked against the pair (hidden sizes, layer) and moved to its device."""
    judge = getattr(rule, "judge", None)
    if judge is None or not hasattr(judge, "config"):
        return rule
    import dataclasses

    from judgekit.judge import check_judge_matches

    check_judge_matches(judge, pair.target.config.hidden_size, pair.target_name,
                        draft_hidden_size=pair.draft.config.hidden_size,
                        num_hidden_layers=pair.target.config.num_hidden_layers)
    return dataclasses.replace(rule, judge=judge.to(pair.device))


def run(args) -> int:
    from judgekit.decoding import SamplingConfig, SpeculativeDecoder
    from judgekit.models import load_model_pair

    sampling = SamplingConfig(args.temperature, args.top_k, args.top_p)
    rule = build_rule(args)  # validate the rule's parameters (and load the judge) before loading models
    pair = load_model_pair(args.target, args.draft, args.device, args.dtype)
    rule = bind_rule(rule, pair)
    # The decoder reads the judge's layer and features from the judge's own config.
    decoder = SpeculativeDecoder(pair, rule, args.block_size, sampling)
    gens = decoder.generate(args.prompt, args.max_new_tokens, tuple(args.stop or ()), args.seed,
                            chat_template=not args.no_chat_template)
    if args.json:
        payload = [g.to_dict() for g in gens]
        print(json.dumps(payload[0] if len(payload) == 1 else payload))
        return 0
    for g in gens:
        s = g.stats
        print(g.text)
        print(f"-- {s.new_tokens} tokens, block efficiency {s.block_efficiency:.2f}, "
              f"{s.tokens_per_s:.1f} tokens/s, target calls {s.target_calls}, draft calls {s.draft_calls}, "
              f"finish: {g.finish_reason}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("generate", help="speculative decoding of prompts with an acceptance rule",
                       description="Speculative decoding with any of the paper's acceptance rules.")
    add_model_args(p)
    p.add_argument("--prompt", action="append", required=True, help="prompt text (repeat for several)")
    p.add_argument("--stop", action="append", help="stop string (repeatable)")
    add_rule_args(p)
    add_sampling_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object (a list for several prompts)")
    p.set_defaults(func=run)
