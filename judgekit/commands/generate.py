"""`judgekit generate`: speculative decoding of one or more prompts with any acceptance rule."""

from __future__ import annotations

import argparse
import json

from judgekit.errors import JudgekitError


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", required=True, help="target model: hub id, local directory or pocket-target")
    p.add_argument("--draft", required=True, help="draft model: hub id, local directory or pocket-draft")
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:1, ...")
    p.add_argument("--dtype", default="auto", choices=["auto", "bf16", "fp16", "fp32"])


def add_rule_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("acceptance rule")
    g.add_argument("--rule", default="lossless",  # names not listed here: that would import torch for --help
                   help="verification rule (default lossless; an unknown name lists them all)")
    g.add_argument("--lenience", type=float, default=0.5, help="lenience l in (0, 1] (rule lenience)")
    g.add_argument("--lam", type=float, default=0.5,
                   help="interpolation lambda: [0, 1] for rule cos, (0, 1] for cos-adaptive and cos-ceiling")
    g.add_argument("--fuzzy-threshold", type=float, default=0.5, help="divergence threshold T (rule fuzzy)")
    g.add_argument("--divergence", default="kl", choices=["kl", "tv", "js"], help="D for rule fuzzy")
    g.add_argument("--judge", help="trained judge directory (rule judge)")
    g.add_argument("--judge-threshold", type=float, default=0.5, help="accept if P(important) < this")
    g.add_argument("--p-base", type=float, default=0.1, help="min-p base (rules speccascade, minp)")
    g.add_argument("--epsilon", type=float, default=0.0009, help="eta-sampling epsilon (rules typical, eta)")
    g.add_argument("--delta", type=float, default=0.03, help="eta-sampling delta (rules typical, eta)")


def add_sampling_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("decoding")
    g.add_argument("--block-size", type=int, default=8, help="draft tokens per step (gamma)")
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    g.add_argument("--top-k", type=int)
    g.add_argument("--top-p", type=float)
    g.add_argument("--max-new-tokens", type=int, default=256,
                   help="same default as evaluation and mining (evaluate_rule, judgekit mine)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--no-chat-template", action="store_true", help="feed the prompt text as is")


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
        from judgekit.judge import load_judge

        params.update(judge=load_judge(args.judge), threshold=args.judge_threshold)
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
