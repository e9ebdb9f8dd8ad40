"""`judgekit bench decode`: tokens/s of target greedy, HF assisted generation and judgekit's decoder."""

from __future__ import annotations

from judgekit.commands._args import add_model_args, add_rule_choice
from judgekit.errors import JudgekitError

DEFAULT_PROMPTS = [
    "Tom has 3 apples and buys 5 more. How many apples does he have now?",
    "Write a function that returns the sum of the even numbers in a list.",
    "A shop sells pens at 4 dollars each. Mia buys 6 pens and pays with 50 dollars. What is her change?",
    "Explain speculative decoding in two sentences.",
]


def _prompts_for(args, pair, kind: str) -> list[list[int]]:
    """``kind``: the --pair preset, or "models" for a --target/--draft pair (real text prompts)."""
    import torch  # here, not at the top: `judgekit --help` must not pay for importing torch

    if kind in ("cpu", "qwen2.5"):
        g = torch.Generator().manual_seed(args.seed)
        return [torch.randint(0, pair.vocab_size, (args.prompt_len,), generator=g).tolist()
                for _ in range(args.prompts)]
    from judgekit.models import encode_prompt, format_prompt

    texts = DEFAULT_PROMPTS
    if args.task:
        from judgekit.tasks import get_task

        task = get_task(args.task)
        texts = [task.build_prompt(p, pair.tokenizer) for p in task.load(args.split, limit=args.prompts)]
        return [encode_prompt(pair.tokenizer, t) for t in texts]
    texts = (texts * args.prompts)[: args.prompts]
    return [encode_prompt(pair.tokenizer, format_prompt(pair.tokenizer, t)) for t in texts]


def run_decode(args) -> int:
    import torch

    from judgekit.benchmarks import format_report, run_decode_bench, synthetic_pair
    from judgekit.models import load_model_pair

    if args.repeats < 1:
        raise JudgekitError(f"--repeats must be >= 1, got {args.repeats}")
    if args.threads:
        torch.set_num_threads(args.threads)
    kind = args.pair
    if args.target or args.draft:
        if not (args.target and args.draft):
            raise JudgekitError("give both --target and --draft (or neither, with --pair)")
        pair = load_model_pair(args.target, args.draft, args.device, args.dtype)
        kind = "models"
    elif args.pair == "pocket":
        pair = load_model_pair("pocket-target", "pocket-draft", args.device, args.dtype)
    elif args.pair == "cpu":
        pair = synthetic_pair("cpu-target", "cpu-draft", args.agreement, args.device, args.dtype)
    else:
        pair = synthetic_pair("qwen2.5-7b", "qwen2.5-0.5b", args.agreement, args.device, args.dtype)
    prompts = _prompts_for(args, pair, kind)
    if args.batch_size < 1:
        raise JudgekitError(f"--batch-size must be >= 1, got {args.batch_size}")
    timings, identical = run_decode_bench(pair, prompts, args.block_size, args.max_new_tokens, args.repeats,
                                          args.batch_size, args.compile, cuda_graphs=args.cuda_graphs,
                                          tree=args.tree)
    title = (f"pair {pair.target_name} / {pair.draft_name} on {pair.device} ({str(pair.dtype).replace('torch.', '')}), "
             f"gamma={args.block_size}, {len(prompts)} prompts, batch size {args.batch_size}, "
             f"max_new_tokens={args.max_new_tokens}" + (f", tree {args.tree}" if args.tree else "")
             + (f"; median of {args.repeats} interleaved rounds" if args.repeats > 1 else ""))
    print(format_report(timings, identical, title, cpu_clock=pair.device.type == "cpu"))
    return 0 if identical else 1


def _task_problems_pair(args):
    """(task, problems, pair) of `bench mine` / `bench eval`, with torch's threads set first."""
    import torch

    from judgekit.models import load_model_pair
    from judgekit.tasks import get_task

    if args.threads:
        torch.set_num_threads(args.threads)
    task = get_task(args.task)
    problems = task.load(args.split, limit=args.problems, data_file=args.data_file)
    if not problems:
        raise JudgekitError(f"task {args.task!r} has no problems in split {args.split!r}")
    return task, problems, load_model_pair(args.target, args.draft, args.device, args.dtype)


def run_mine(args) -> int:
    from judgekit.benchmarks import format_mine_report, run_mine_bench
    from judgekit.mine.miner import MineConfig

    task, problems, pair = _task_problems_pair(args)
    cfg = MineConfig(max_new_tokens=args.max_new_tokens)
    report = run_mine_bench(pair, task, problems, cfg, args.batch_size)
    print(format_mine_report(report, f"mining {args.task} ({args.split}) with {args.target} / {args.draft} on "
                                     f"{pair.device}, max_new_tokens={args.max_new_tokens}"))
    return 0


def run_eval_bench_cmd(args) -> int:
    from judgekit.benchmarks.eval import format_eval_report, run_eval_bench
    from judgekit.evaluate.sweep import EvalSettings, Sweep

    try:
        sizes = [int(x) for x in args.batch_sizes.split(",") if x.strip()]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise JudgekitError(f"--batch-sizes must be a comma list of integers >= 1, got {args.batch_sizes!r}")
    if args.repeats < 1:
        raise JudgekitError(f"--repeats must be >= 1, got {args.repeats}")
    task, problems, pair = _task_problems_pair(args)
    points = Sweep(args.rule, temperatures=[args.temperature], block_sizes=[args.block_size]).points()
    settings = EvalSettings(args.task, args.target, args.draft, args.split, args.data_file, args.problems,
                            args.max_new_tokens)
    timings, identical = run_eval_bench(pair, task, problems, points, settings, sizes, args.out, args.repeats)
    title = (f"judgekit eval throughput: {args.task} ({len(problems)} problems x {len(points)} points), "
             f"{args.target} / {args.draft} on {pair.device}, gamma={args.block_size}, T={args.temperature:g}, "
             f"max_new_tokens={args.max_new_tokens}"
             + (f", median of {args.repeats} rotated rounds" if args.repeats > 1 else ""))
    print(format_eval_report(timings, identical, title, cpu_clock=pair.device.type == "cpu"))
    return 0 if identical or args.temperature > 0 else 1


def _add_task_args(p, split: str, problems: int) -> None:
    """The task, pair and problems `bench mine` and `bench eval` share (the pocket pair by default)."""
    p.add_argument("--task", default="pocket-math")
    add_model_args(p, required=False, target="pocket-target", draft="pocket-draft")
    p.add_argument("--split", default=split)
    p.add_argument("--data-file")
    p.add_argument("--problems", type=int, default=problems)
    p.add_argument("--threads", type=int, help="CPU threads for torch")


def register(sub) -> None:
    p = sub.add_parser("bench", help="speed benchmarks (decode, mine, eval)")
    bench_sub = p.add_subparsers(dest="bench", metavar="BENCH")
    d = bench_sub.add_parser("decode", help="HF target-only vs HF assisted vs judgekit (eager and fast path)",
                             description="Times the greedy decoders on the same pair, prompts and block size, "
                                         "checks their outputs are identical, and prints tokens/s and ratios.")
    d.add_argument("--pair", default="pocket", choices=["pocket", "cpu", "qwen2.5"],
                   help="pocket: the shipped pocket pair; cpu: small random-init Qwen2 pair with controlled "
                        "agreement; qwen2.5: random-init Qwen2.5-7B / 0.5B shapes (GPU)")
    add_model_args(d, required=False, note="--target and --draft together override --pair")
    d.add_argument("--task", help="take prompts from a task (e.g. pocket-math) instead of the built-in ones")
    d.add_argument("--split", default="test")
    d.add_argument("--agreement", type=float, default=0.8, help="draft/target agreement of synthetic pairs")
    d.add_argument("--prompts", type=int, default=4)
    d.add_argument("--prompt-len", type=int, default=32, help="prompt length for synthetic pairs")
    d.add_argument("--block-size", type=int, default=8)
    d.add_argument("--max-new-tokens", type=int, default=128)
    d.add_argument("--repeats", type=int, default=1,
                   help="interleaved rounds (each decoder once per round, the order rotated); the median is reported")
    d.add_argument("--batch-size", type=int, default=1,
                   help="prompts decoded together by HF target-only generate and judgekit (both backends)")
    d.add_argument("--compile", action="store_true", help="torch.compile the fast path's forwards")
    d.add_argument("--cuda-graphs", action="store_true",
                   help="also time the fast path with CUDA-graph replay of its decoding steps (CUDA only)")
    d.add_argument("--tree", metavar="SPEC",
                   help="also time the fast path drafting this static tree (2,2,1,1 or eagle; docs/design.md §2.1)")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's choice)")
    d.set_defaults(func=run_decode)
    m = bench_sub.add_parser("mine", help="judgekit's miner vs the plain reference procedure",
                             description="Mines the same problems with judgekit's miner and a plain "
                                         "reimplementation of the reference procedure (full re-forward, rollouts "
                                         "to EOS/max_new_tokens, batch 1); prints label agreement and the "
                                         "wall-time ratio.")
    _add_task_args(m, split="train", problems=8)
    m.add_argument("--max-new-tokens", type=int, default=256)
    m.add_argument("--batch-size", type=int, default=8, help="problems judgekit's miner advances together")
    m.set_defaults(func=run_mine)
    e = bench_sub.add_parser("eval", help="`judgekit eval` throughput at several batch sizes",
                             description="Runs the same evaluation (decode, grade, record) at each batch size in "
                                         "one process and prints aggregate tokens/s, the ratio to the first "
                                         "batch size, and whether the greedy records are identical.")
    _add_task_args(e, split="test", problems=64)
    add_rule_choice(e, many=True, default=["lossless"], help="rules to evaluate at their default parameters")
    e.add_argument("--temperature", type=float, default=0.0)
    e.add_argument("--block-size", type=int, default=8)
    e.add_argument("--max-new-tokens", type=int, default=256)
    e.add_argument("--batch-sizes", default="1,16", help="comma list; ratios are against the first")
    e.add_argument("--repeats", type=int, default=1,
                   help="rounds of all batch sizes, the order rotated each round; medians are reported")
    e.add_argument("--out", help="directory for the runs' records (default: a new temporary directory)")
    e.set_defaults(func=run_eval_bench_cmd)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
