"""`judgekit demo`: mine -> train -> evaluate on the embedded pocket world (no downloads, a few minutes on CPU).

Each stage is the real one, called as a library: `mine_to_dir` (what `judgekit mine` runs), the judge training
`judgekit train` runs, and `judgekit eval`'s job (judgekit.evaluate.job) with the sweep of
judgekit/configs/pocket-demo.toml, so the demo is the pipeline a user runs on a real pair, shrunk.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from judgekit.errors import JudgekitError

MINED_TASKS = ("pocket-math", "pocket-code")


def demo_config() -> Path:
    """The demo's sweep, shipped inside the package so that an installed judgekit has it."""
    return Path(__file__).resolve().parent.parent / "configs" / "pocket-demo.toml"


def _mix_label(mix: str) -> str:
    return "judge-" + mix.replace(":", "to")


def train_judge(mined: list[str], mix: str, out: Path, epochs: int) -> None:
    """One judge on the mined directories at a math:code mix, with `judgekit train`'s defaults on one CPU."""
    from judgekit.judge import data as jd
    from judgekit.judge import train as tj

    sources, split, spec = jd.prepare(mined)
    selection = jd.select(sources, split, mix, jd.parse_mix(mix, len(sources)), None, "problems")
    cfg = tj.TrainConfig(max_epochs=epochs, accelerator="cpu", devices=1, progress=False)
    tj.train_one(jd.build_data(sources, selection, spec), cfg, out, resume=True)  # a killed demo resumes


def run(args) -> int:
    import torch

    from judgekit.evaluate import job as eval_job
    from judgekit.evaluate.summary import summary_markdown
    from judgekit.mine.miner import MineConfig, mine_to_dir
    from judgekit.models import load_model_pair
    from judgekit.store.stats import dir_stats
    from judgekit.tasks import get_task

    try:
        counts = [int(x) for x in str(args.mine_problems).split(",") if x.strip()]
    except ValueError:
        counts = []
    if len(counts) == 1:
        counts *= len(MINED_TASKS)
    if args.batch_size < 1:
        raise JudgekitError(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.problems < 1 or len(counts) != len(MINED_TASKS) or min(counts) < 1:
        raise JudgekitError("--problems must be >= 1 and --mine-problems one count >= 1 or MATH,CODE")
    mixes = [m.strip() for m in args.mixes.split(",") if m.strip()]
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    start = time.perf_counter()
    steps = 2 + len(tasks)

    def stage(i: int, text: str) -> None:
        print(f"\n== [{i}/{steps}] {text}  (t={time.perf_counter() - start:.0f}s)", flush=True)

    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out or tempfile.mkdtemp(prefix="judgekit-demo-"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"judgekit demo -> {out}  (pocket world: a trained target and a weaker draft, one tokenizer)")
    pair = load_model_pair("pocket-target", "pocket-draft", args.device, "auto")

    stage(1, "mining " + " and ".join(f"{n} {t}" for n, t in zip(counts, MINED_TASKS))
          + " training problems (semi-greedy counterfactual substitution)")
    mined = []
    for name, count in zip(MINED_TASKS, counts):
        task = get_task(name)
        target_dir = out / "mined" / name
        t0 = time.perf_counter()
        mine_to_dir(pair, task, task.load("train", limit=count), str(target_dir),
                    MineConfig(max_new_tokens=args.max_new_tokens), split="train", limit=count,
                    resume=True, flush_every=4, progress=False)
        s = dir_stats(target_dir)
        print(f"   {name}: {s['problems']} problems, {s['mismatches']} mismatches, {s['important']} important "
              f"({time.perf_counter() - t0:.0f}s) -> {target_dir}", flush=True)
        mined.append(str(target_dir))

    stage(2, f"training judges on the {' and '.join(mixes)} math:code mixes (`judgekit train`)")
    judges = []
    for mix in mixes:
        judge_dir = out / "judges" / _mix_label(mix)
        if not (judge_dir / "judge_config.json").exists():
            try:  # a refusal (e.g. too few mismatches mined) is reported, not fatal
                train_judge(mined, mix, judge_dir, args.train_epochs)
            except JudgekitError as err:
                print(f"   judgekit: error: {err}\n   the {mix} judge was not trained; evaluating without it "
                      "(mine more problems: --mine-problems)", flush=True)
                continue
        judges.append(str(judge_dir))

    def drop_judge(sweeps):
        if judges:
            return sweeps
        kept = [{**s, "rule": [r for r in s["rule"] if r != "judge"]} for s in sweeps]
        return [s for s in kept if s["rule"]]

    for i, name in enumerate(tasks, 3):
        stage(i, f"evaluating on {args.problems} held-out {name} problems: lossless, lenience, CoS, the judges "
                 "(percentile thresholds), speccascade/minp, typical/eta; greedy and sampled")
        given = {"task": name, "limit": args.problems, "out": str(out / "eval" / name),
                 "max_new_tokens": args.max_new_tokens, "batch_size": args.batch_size,
                 "title": f"{name} (pocket world)", **({"judge": judges} if judges else {})}
        job = eval_job.prepare(str(demo_config()), given, sweep_filter=drop_judge)
        rows = eval_job.run(job, pair=pair, quiet=args.quiet)
        print(summary_markdown(rows, given["title"]))
    print(f"\n== done in {time.perf_counter() - start:.0f}s. Plots: "
          + ", ".join(str(p) for p in sorted((out / "eval").glob("*/*.png"))))
    print(f"   compare tasks: judgekit plot {' '.join(str(out / 'eval' / t) for t in tasks)} --out cmp.png")
    return 0


def register(sub) -> None:
    p = sub.add_parser("demo", help="mine -> train -> evaluate on the embedded pocket world",
                       description="The whole pipeline on the pocket world: mine pocket-math and pocket-code "
                                   "training problems, train judges on 9:1 (and 1:9) math:code mixes, then "
                                   "`judgekit eval` the rules (judgekit/configs/pocket-demo.toml) on held-out "
                                   "problems, greedy and sampled; prints the summary tables and writes plots. "
                                   "Rerunning with the same --out resumes every stage.")
    p.add_argument("--out", help="output directory (default: a new temporary directory)")
    p.add_argument("--problems", type=int, default=30, help="held-out problems per task to evaluate")
    p.add_argument("--mine-problems", default="48,24",
                   help="training problems to mine: MATH,CODE (pocket-code rollouts run tests, so cost more) or "
                        "one count for both")
    p.add_argument("--mixes", default="9:1,1:9", help="math:code mixes to train judges on, comma-separated")
    p.add_argument("--tasks", default="pocket-math,pocket-code", help="tasks to evaluate, comma-separated")
    p.add_argument("--max-new-tokens", type=int, default=160)
    p.add_argument("--train-epochs", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=16,
                   help="held-out problems decoded together by `judgekit eval` (greedy results do not depend on it)")
    p.add_argument("--threads", type=int, help="CPU threads for torch")
    p.add_argument("--device", default="auto")
    p.add_argument("--quiet", action="store_true", help="no per-point progress lines")
    p.set_defaults(func=run)
