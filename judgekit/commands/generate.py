"""`judgekit generate`: speculative decoding of one or more prompts with any acceptance rule."""

from __future__ import annotations

import json

from judgekit import config as C
from judgekit.commands._args import add_model_args, add_rule_args, add_sampling_args, check_args
from judgekit.config import loading_options
from judgekit.errors import JudgekitError


def build_rule(args):
    """The rule named on the command line, with its parameters; a judge is loaded here, once.

    Cheap and before the models load, so a bad flag fails fast; :func:`judgekit.judge.head.bind_rule` then checks
    the judge against the loaded pair and moves it to the pair's device.
    """
    from judgekit.decode.params import rule_spec
    from judgekit.decode.rules import make_rule

    spec = rule_spec(args.rule)
    params = {p.name: getattr(args, p.key) for p in spec.params}
    if spec.needs_judge:
        if not args.judge:
            raise JudgekitError("rule judge needs --judge PATH (a trained judge directory)")
        from judgekit.evaluate.sweep import load_judge_once, resolve_threshold

        judge, _ = load_judge_once(args.judge, {})
        params.update(judge=judge, threshold=resolve_threshold(judge, params["threshold"]))
    return make_rule(args.rule, **params)


def run(args) -> int:
    from judgekit.decode.decoder import SpeculativeDecoder
    from judgekit.decode.sampling import SamplingConfig
    from judgekit.judge.head import bind_rule
    from judgekit.models import encode_prompt, format_prompt, load_model_pair

    check_args(args, C.DECODING)
    sampling = SamplingConfig(args.temperature, args.top_k, args.top_p)
    if args.tree:
        from judgekit.decode.tree import parse_tree

        parse_tree(args.tree)  # a bad spec fails before the models load
    rule = build_rule(args)  # validate the rule's parameters (and load the judge) before loading models
    pair = load_model_pair(args.target, args.draft, args.device, args.dtype, **loading_options(args))
    longest = max(len(encode_prompt(pair.tokenizer, format_prompt(pair.tokenizer, text, args.chat_template)))
                  for text in args.prompt)
    C.check_positions(pair, args.max_new_tokens, longest)
    rule = bind_rule(rule, pair)
    # The decoder reads the judge's layer and features from the judge's own config.
    decoder = SpeculativeDecoder(pair, rule, args.block_size, sampling, tree=args.tree)
    gens = decoder.generate(args.prompt, args.max_new_tokens, tuple(args.stop or ()), args.seed,
                            chat_template=args.chat_template)
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
    add_model_args(p, loading=True)
    p.add_argument("--prompt", action="append", required=True, help="prompt text (repeat for several)")
    p.add_argument("--stop", action="append", help="stop string (repeatable)")
    add_rule_args(p)
    add_sampling_args(p)
    p.add_argument("--tree", metavar="SPEC",
                   help="draft a static tree per step instead of a chain: per-depth branching (2,2,1,1) or "
                        "eagle; its depth replaces --block-size (static-cache backend; docs/design.md §2.1)")
    p.add_argument("--json", action="store_true", help="print one JSON object (a list for several prompts)")
    p.set_defaults(func=run)
