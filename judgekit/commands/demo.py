"""`judgekit demo`: the whole pipeline that exists so far, on the embedded pocket world (no downloads)."""

from __future__ import annotations

import tempfile


def run(args) -> int:
    import torch

    from judgekit.decoding import SamplingConfig
    from judgekit.evaluation import evaluate_rule, format_table
    from judgekit.mining import MineConfig, mine_to_dir
    from judgekit.models import load_model_pair
    from judgekit.rules import make_rule
    from judgekit.store import dir_stats, format_stats, validate_dir
    from judgekit.tasks import get_task

    if args.threads:
        torch.set_num_threads(args.threads)
    print("== loading the pocket pair (data/pocket: a trained target and a weaker draft, one tokenizer)")
    pair = load_model_pair("pocket-target", "pocket-draft", args.device, "auto")
    task = get_task("pocket-math")
    problems = task.load("test", limit=args.problems)
    print(f"== speculative decoding of {len(problems)} held-out pocket-math problems, greedy, gamma={args.block_size}")
    rules = [
        ("lossless", make_rule("lossless")),
        ("cos lambda=0.5", make_rule("cos", lam=0.5)),
        ("fuzzy kl<1.0", make_rule("fuzzy", threshold=1.0, divergence="kl")),
        ("speccascade p_base=0.3", make_rule("speccascade", p_base=0.3)),
        ("typical eps=0.3 delta=0.5", make_rule("typical", epsilon=0.3, delta=0.5)),
    ]
    scores = [evaluate_rule(pair, task, problems, rule, label, block_size=args.block_size,
                            max_new_tokens=args.max_new_tokens) for label, rule in rules]
    print(format_table(scores))
    print(f"\n== the same problems sampled at temperature {args.temperature}: each truncation rule beside its "
          "matched baseline (the truncated target verified losslessly)")
    sampled = [
        ("lossless", make_rule("lossless")),
        ("lenience l=0.5", make_rule("lenience", lenience=0.5)),
        ("cos lambda=0.5", make_rule("cos", lam=0.5)),
        ("speccascade p_base=0.1", make_rule("speccascade", p_base=0.1)),
        ("minp p_base=0.1 (matched)", make_rule("minp", p_base=0.1)),
        ("typical eps=0.05 delta=0.3", make_rule("typical", epsilon=0.05, delta=0.3)),
        ("eta eps=0.05 delta=0.3 (matched)", make_rule("eta", epsilon=0.05, delta=0.3)),
    ]
    sampling = SamplingConfig(temperature=args.temperature)
    scores = [evaluate_rule(pair, task, problems, rule, label, sampling=sampling, block_size=args.block_size,
                            max_new_tokens=args.max_new_tokens, seed=args.seed) for label, rule in sampled]
    print(format_table(scores))
    out = args.out or tempfile.mkdtemp(prefix="judgekit-demo-")
    print(f"\n== mining {args.mine_problems} pocket-math training problems into {out}")
    mine_to_dir(pair, task, task.load("train", limit=args.mine_problems), out,
                MineConfig(max_new_tokens=args.max_new_tokens), split="train", limit=args.mine_problems,
                resume=True, flush_every=1, progress=False)
    validate_dir(out)
    print(format_stats(dir_stats(out)))
    return 0


def register(sub) -> None:
    p = sub.add_parser("demo", help="run the pipeline end to end on the embedded pocket world",
                       description="Speculative decoding with several acceptance rules on held-out pocket-math "
                                   "problems, greedy and sampled (accuracy, block efficiency, tokens/s), then "
                                   "counterfactual mining of a few training problems and their summary.")
    p.add_argument("--problems", type=int, default=20, help="held-out problems to decode per rule")
    p.add_argument("--mine-problems", type=int, default=6)
    p.add_argument("--block-size", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=200)
    p.add_argument("--out", help="mining output directory (default: a new temporary directory)")
    p.add_argument("--temperature", type=float, default=1.0, help="temperature of the sampled comparison")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, help="CPU threads for torch")
    p.add_argument("--device", default="auto")
    p.set_defaults(func=run)
