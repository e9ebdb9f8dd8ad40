"""`judgekit analyze`: each rule's induced distribution, distortion and acceptance in closed form, and
Lemma 1's gain/loss terms for min-p and eta (docs/design.md §2), on synthetic or model-read (p, q) pairs."""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
from pathlib import Path

from judgekit.commands._args import add_model_args, add_rule_args, add_rule_choice, comma_list
from judgekit.errors import JudgekitError



def register(sub) -> None:
    p = sub.add_parser("analyze", help="closed-form analysis of the rules: induced distributions, TV/KL, "
                                       "acceptance, Lemma 1 (Figure 5)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_argument_group("(p, q) pairs: a synthetic family (default) or a model pair on a task")
    src.add_argument("--family", default="zipf", choices=["zipf", "dirichlet"], help="synthetic p family")
    src.add_argument("--pairs", type=int, default=200, help="synthetic pairs per noise level")
    src.add_argument("--vocab", type=int, default=200, help="synthetic vocabulary size")
    src.add_argument("--noise", type=comma_list(float), default=[0.5, 1.0, 2.0],
                     help="std of the Gaussian logit noise turning p into q (comma list: one family each)")
    src.add_argument("--sharpness", type=float, default=1.0,
                     help="q = softmax(sharpness * log p + noise): > 1 gives an over-confident draft")
    src.add_argument("--seed", type=int, default=0)
    add_model_args(src, required=False, note="a pair given with --task replaces the synthetic family")
    src.add_argument("--task", help="task whose target responses are read (e.g. pocket-math)")
    src.add_argument("--limit", type=int, default=8, help="problems read (model pairs)")
    src.add_argument("--split", default="test")
    src.add_argument("--data-file", help="local JSONL/Parquet file of the task's problems")
    src.add_argument("--temperature", type=float, default=1.0, help="temperature of p and q (0: one-hot rows)")
    src.add_argument("--max-new-tokens", type=int, default=128)
    from judgekit.decode.params import RULE_SPECS

    analysable = [name for name, spec in RULE_SPECS.items() if not spec.needs_judge]
    add_rule_choice(p, many=True, default=analysable, help="rules to analyse (default: all but judge)")
    add_rule_args(p, mode="grid")
    lemma = p.add_argument_group("Lemma 1 sweep (min-p over p_base, eta over epsilon)")
    lemma.add_argument("--sweep-p-base", type=comma_list(float),
                       default=[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9])
    lemma.add_argument("--sweep-epsilon", type=comma_list(float),
                       default=[0.0003, 0.0009, 0.003, 0.009, 0.03, 0.09])
    lemma.add_argument("--sweep-delta", type=float,
                       help="eta's delta in the sweep (default sqrt(epsilon), Hewitt et al.'s choice)")
    tree = p.add_argument_group("Theorem 1: truncation-based verification on a chain (KL_SD) and an EAGLE tree "
                                "(KL_EAGLE), for speccascade / typical among --rule")
    tree.add_argument("--tree-width", type=comma_list(int), default=[1, 2, 4],
                      help="siblings per position of the tree (the draft's top-m tokens)")
    tree.add_argument("--theorem1-noise", type=comma_list(float), default=[0.0, 0.1, 0.25, 0.5, 1.0, 2.0],
                      help="noise levels of the synthetic family for Theorem 1 (0: q = p)")
    p.add_argument("--out", help="directory for rules.csv, lemma1.csv, theorem1.csv, analysis.json, "
                                 "figure5.png and theorem1.png")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.set_defaults(func=run)


def _finite(value):
    """JSON has no infinity: an infinite KL is written as null (its count is in kl_infinite)."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    keys = list(dict.fromkeys(k for r in rows for k in r))
    writer = csv.DictWriter(buf, fieldnames=keys)
    writer.writeheader()
    for r in rows:
        writer.writerow({k: json.dumps(v, sort_keys=True) if isinstance(v, dict) else v for k, v in r.items()})
    return buf.getvalue()


def _table(rows: list[dict], cols: list[str]) -> str:
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.4f}"
        if isinstance(v, dict):
            return ",".join(f"{k}={v[k]}" for k in v)
        return str(v)
    cells = [[fmt(r.get(c, "")) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def check_out(out: str | None) -> None:
    """--out must be new, empty, or an earlier analysis: never a file or another stage's directory."""
    if out is None:
        return
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise JudgekitError(f"--out {out} is a file; give a directory for the analysis")
    if path.is_dir() and any(path.iterdir()) and not (path / "analysis.json").is_file():
        raise JudgekitError(f"--out {out} holds other files (not an earlier analysis); give a new directory")


def run(args) -> int:
    import torch

    from judgekit.evaluate import analysis
    from judgekit.store.atomic import atomic_write_bytes

    from judgekit.decode.params import param_keys

    check_out(args.out)
    if args.seed < 0:
        raise JudgekitError(f"--seed must be >= 0, got {args.seed}")
    if args.threads < 1:
        raise JudgekitError(f"--threads must be >= 1, got {args.threads}")
    torch.set_num_threads(args.threads)
    if args.sweep_delta is not None and args.sweep_delta <= 0:
        raise JudgekitError("delta values must be > 0")
    values = {key: getattr(args, key) for key in param_keys() if hasattr(args, key)}
    rules = analysis.rule_grid(args.rule, values)  # validates every parameter before any model is loaded
    if any(m < 1 for m in args.tree_width) or \
            any(not v >= 0 for v in args.theorem1_noise):
        raise JudgekitError("--tree-width values must be >= 1 and --theorem1-noise values >= 0")
    model_flags = [args.target, args.draft, args.task]
    if any(model_flags):
        if not all(model_flags):
            raise JudgekitError("a model pair needs --target, --draft and --task together")
        sources = [analysis.model_pairs(args.target, args.draft, args.task, args.limit, args.temperature,
                                        args.max_new_tokens, args.device, args.dtype, args.split, args.data_file)]
    else:
        sources = [analysis.synthetic_pairs(args.family, args.pairs, args.vocab, noise, args.seed,
                                            sharpness=args.sharpness)
                   for noise in args.noise]
    rule_rows, lemma_rows = [], []
    for pairs in sources:
        rule_rows += analysis.analyse(pairs, rules)
        lemma_rows += analysis.lemma1_sweep(pairs, args.sweep_p_base, args.sweep_epsilon, args.sweep_delta)
    t1_sources = sources if any(model_flags) else [
        analysis.synthetic_pairs(args.family, args.pairs, args.vocab, noise, args.seed, sharpness=args.sharpness)
        for noise in args.theorem1_noise]
    t1_rows = analysis.theorem1_rows(t1_sources, rules, args.tree_width)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(out / "rules.csv", _csv(rule_rows).encode())
        atomic_write_bytes(out / "lemma1.csv", _csv(lemma_rows).encode())
        if t1_rows:
            atomic_write_bytes(out / "theorem1.csv", _csv(t1_rows).encode())
        doc = {"sources": [{"source": s.source, **s.meta} for s in sources],
               "rules": [{k: _finite(v) for k, v in r.items()} for r in rule_rows],
               "lemma1": lemma_rows, "theorem1": [{k: _finite(v) for k, v in r.items()} for r in t1_rows]}
        atomic_write_bytes(out / "analysis.json", json.dumps(doc, indent=1).encode())
        plot_lemma1(lemma_rows, out / "figure5.png")
        if t1_rows:
            plot_theorem1(t1_rows, out / "theorem1.png")
    if args.json:
        print(json.dumps({"rules": [{k: _finite(v) for k, v in r.items()} for r in rule_rows],
                          "lemma1": lemma_rows,
                          "theorem1": [{k: _finite(v) for k, v in r.items()} for r in t1_rows]}))
        return 0
    print(_table(rule_rows, ["source", "rule", "params", "reference", "n", "tv_pq", "tv", "kl", "kl_infinite",
                             "acceptance"]))
    print()
    print(_table(lemma_rows, ["source", "truncation", "param", "value", "gain", "loss", "delta_be",
                              "delta_acceptance"]))
    if t1_rows:
        print()
        print(_table(t1_rows, ["source", "rule", "params", "width", "tv_pq", "kl_sd", "kl_eagle",
                               "acceptance_sd", "acceptance_eagle", "baseline_acceptance_sd",
                               "baseline_acceptance_eagle"]))
    if args.out:
        extra = ", theorem1.csv, theorem1.png" if t1_rows else ""
        print(f"\nwrote {args.out}/rules.csv, lemma1.csv, analysis.json, figure5.png{extra}")
    return 0


def plot_lemma1(rows: list[dict], path: Path) -> None:
    """The paper's Figure 5: Lemma 1's gain, loss and net Delta BE against p_base (min-p) and epsilon (eta),
    mean over the pairs with a 10-90 % band, one line style per source."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = ["-", "--", ":", "-."]
    colours = {"gain": "tab:green", "loss": "tab:red", "delta_be": "tab:blue"}
    sources = list(dict.fromkeys(r["source"] for r in rows))
    for ax, truncation, xlabel in ((axes[0], "minp", "p_base (min-p)"), (axes[1], "eta", "epsilon (eta)")):
        for s_i, source in enumerate(sources):
            sel = sorted((r for r in rows if r["source"] == source and r["truncation"] == truncation),
                         key=lambda r: r["value"])
            if not sel:
                continue
            x = [r["value"] for r in sel]
            for term, colour in colours.items():
                label = f"{'ΔBE' if term == 'delta_be' else term} {source}"
                ax.plot(x, [r[term] for r in sel], styles[s_i % len(styles)], color=colour, label=label,
                        marker="o", ms=3)
                ax.fill_between(x, [r[f"{term}_q10"] for r in sel], [r[f"{term}_q90"] for r in sel],
                                color=colour, alpha=0.12, lw=0)
        ax.axhline(0.0, color="grey", lw=0.8)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("change in acceptance probability")
        if truncation == "eta":
            ax.set_xscale("log")
        ax.set_title(f"Lemma 1: {'min-p' if truncation == 'minp' else 'eta'} truncation")
    axes[1].legend(fontsize=7, loc="best")
    fig.tight_layout()
    tmp = path.with_name(path.name + ".tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    os.replace(tmp, path)


def plot_theorem1(rows: list[dict], path: Path) -> None:
    """Theorem 1 as a figure: KL from the matched target p_A against TV(p, q), for SpecCascade and typical
    acceptance on a chain (KL_SD, solid) and on top-m trees (KL_EAGLE, dashed, one shade per width); model-pair
    sources, a single TV each, are drawn as points."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in ("speccascade", "typical") if any(r["rule"] == n for r in rows)]
    fig, axes = plt.subplots(1, len(names), figsize=(5.6 * len(names), 4.2), squeeze=False)
    for ax, name in zip(axes[0], names):
        sel = [r for r in rows if r["rule"] == name]
        settings = list(dict.fromkeys(json.dumps(r["params"], sort_keys=True) for r in sel))
        widths = sorted({r["width"] for r in sel})
        for s_i, setting in enumerate(settings):
            colour = f"C{s_i}"
            label = ",".join(f"{k}={v}" for k, v in json.loads(setting).items())
            pts = sorted((r for r in sel if json.dumps(r["params"], sort_keys=True) == setting),
                         key=lambda r: r["tv_pq"])
            sd = {r["source"]: r for r in pts}  # kl_sd does not depend on the width
            sd_pts = sorted(sd.values(), key=lambda r: r["tv_pq"])
            marker = "o" if len(sd_pts) == 1 else None
            ax.plot([r["tv_pq"] for r in sd_pts], [r["kl_sd"] for r in sd_pts], "-", color=colour,
                    marker=marker or ".", label=f"KL_SD {label}")
            for w_i, m in enumerate(widths):
                wp = [r for r in pts if r["width"] == m]
                ax.plot([r["tv_pq"] for r in wp], [r["kl_eagle"] for r in wp], "--", color=colour,
                        alpha=1.0 - 0.6 * w_i / max(1, len(widths) - 1), marker=marker or "x", ms=4,
                        label=f"KL_EAGLE m={m} {label}")
        ax.set_xlabel("TV(p, q)")
        ax.set_ylabel("KL(emitted || p_A)")
        ax.set_title(f"Theorem 1: {name}")
        ax.legend(fontsize=6, loc="best")
    fig.tight_layout()
    tmp = path.with_name(path.name + ".tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    os.replace(tmp, path)
