"""Plots of evaluation summaries (matplotlib, Agg, PNG).

* :func:`plot_tradeoff` — block efficiency against quality, one curve per rule (and judge), the lossless point
  marked, error bars from the 95 % intervals (the paper's Figure 4); one panel per temperature.
* :func:`plot_truncation` — each truncation-based rule beside its matched baseline (speccascade vs minp at the
  same p_base, typical vs eta at the same ε, δ): quality with intervals and block efficiency.
"""

from __future__ import annotations

from pathlib import Path

from judgekit.errors import JudgekitError

# rule -> its matched baseline (the truncated target verified losslessly), and the parameters that must agree.
MATCHED_BASELINES = {"speccascade": ("minp", ("p_base",)), "typical": ("eta", ("epsilon", "delta"))}


def _pyplot():
    try:
        import matplotlib
    except ImportError:  # pragma: no cover - matplotlib is a dependency; this guards a broken install
        raise JudgekitError("plots need matplotlib (pip install matplotlib)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def curve_name(row: dict) -> str:
    """The curve a summary row belongs to: its rule, its judge for the judge rule, its divergence for fuzzy."""
    name = row["rule"]
    params = row["params"]
    if "judge" in params:
        name += f" ({Path(params['judge']).name})"
    if "divergence" in params:
        name += f" ({params['divergence']})"
    if row.get("source"):
        name = f"{row['source']}: {name}"
    return name


def plot_tradeoff(rows: list[dict], out: str | Path, title: str = "") -> Path:
    """BE (x) against quality (y) with 95 % interval error bars; one panel per (temperature, block size)."""
    plt = _pyplot()
    panels = sorted({(r["temperature"], r["block_size"]) for r in rows})
    if not panels:
        raise JudgekitError("nothing to plot: no summary rows")
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 4.8), squeeze=False)
    # One colour per curve across all panels, so a rule looks the same greedy and sampled.
    names = list(dict.fromkeys(curve_name(r) for r in rows if r["rule"] != "lossless"))
    palette = plt.get_cmap("tab20" if len(names) > 10 else "tab10")
    colour = {n: palette(i % palette.N) for i, n in enumerate(names)}
    for ax, (temp, gamma) in zip(axes[0], panels):
        sub = [r for r in rows if (r["temperature"], r["block_size"]) == (temp, gamma)]
        curves: dict[str, list[dict]] = {}
        for r in sub:
            curves.setdefault(curve_name(r), []).append(r)
        for name, pts in curves.items():
            pts = sorted(pts, key=lambda r: r["block_efficiency"])
            x = [r["block_efficiency"] for r in pts]
            y = [100 * r["quality"] for r in pts]
            err = [[100 * max(0.0, r["quality"] - r["quality_ci"][0]) for r in pts],
                   [100 * max(0.0, r["quality_ci"][1] - r["quality"]) for r in pts]]
            if pts[0]["rule"] == "lossless":
                ax.errorbar(x, y, yerr=err, fmt="*", markersize=14, color="black", capsize=3, label=name,
                            zorder=5)
            else:
                ax.errorbar(x, y, yerr=err, fmt="-o", markersize=4, capsize=3, label=name, alpha=0.85,
                            color=colour[name])
        ax.set_xlabel("block efficiency (tokens per target call)")
        ax.set_ylabel("quality (% correct, 95 % CI)")
        mode = "greedy" if temp == 0 else f"T={temp:g}"
        ax.set_title(f"{title + ': ' if title else ''}{mode}, γ={gamma}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return _save(fig, out)


def matched_pairs(rows: list[dict]) -> list[tuple[dict, dict]]:
    """(rule row, baseline row) for each truncation rule whose matched baseline was evaluated alongside."""
    out = []
    for r in rows:
        if r["rule"] not in MATCHED_BASELINES:
            continue
        base_rule, keys = MATCHED_BASELINES[r["rule"]]
        for b in rows:
            if (b["rule"] == base_rule and b.get("source") == r.get("source")
                    and (b["temperature"], b["block_size"]) == (r["temperature"], r["block_size"])
                    and all(b["params"].get(k) == r["params"].get(k) for k in keys)):
                out.append((r, b))
                break
    return out


def plot_truncation(rows: list[dict], out: str | Path, title: str = "") -> Path | None:
    """Quality (with intervals) and BE of each truncation rule beside its matched baseline; None if no pair."""
    pairs = matched_pairs(rows)
    if not pairs:
        return None
    plt = _pyplot()
    fig, (axq, axb) = plt.subplots(1, 2, figsize=(max(7.0, 1.6 * len(pairs) + 4), 4.6))
    width = 0.38
    xs = range(len(pairs))
    names = []
    for i, (r, b) in enumerate(pairs):
        mode = "greedy" if r["temperature"] == 0 else f"T={r['temperature']:g}"
        keys = MATCHED_BASELINES[r["rule"]][1]
        names.append(f"{r['rule']}/{b['rule']}\n" + " ".join(f"{k}={r['params'][k]:g}" for k in keys)
                     + f"\n{mode}")
    for off, idx, colour, label in ((-width / 2, 0, "tab:red", "truncation rule"),
                                    (width / 2, 1, "tab:blue", "matched baseline")):
        q = [100 * p[idx]["quality"] for p in pairs]
        err = [[100 * max(0.0, p[idx]["quality"] - p[idx]["quality_ci"][0]) for p in pairs],
               [100 * max(0.0, p[idx]["quality_ci"][1] - p[idx]["quality"]) for p in pairs]]
        axq.bar([x + off for x in xs], q, width, yerr=err, capsize=3, color=colour, label=label)
        axb.bar([x + off for x in xs], [p[idx]["block_efficiency"] for p in pairs], width, color=colour,
                label=label)
    for ax, ylabel in ((axq, "quality (% correct, 95 % CI)"), (axb, "block efficiency")):
        ax.set_xticks(list(xs))
        ax.set_xticklabels(names, fontsize=7)
        ax.set_ylabel(ylabel)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{title + ': ' if title else ''}truncation rules vs matched baselines", fontsize=10)
    fig.tight_layout()
    return _save(fig, out)


def _save(fig, out) -> Path:
    """Write a figure as PNG (creating the folder) and free it: matplotlib keeps open figures alive."""
    plt = _pyplot()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
