"""Plots of evaluation summaries (matplotlib, Agg), each written as PNG and as vector PDF beside it.

* :func:`plot_tradeoff` — block efficiency against quality, one curve per rule (and judge) ordered by BE, each
  point labelled with its parameter, the lossless point a star drawn below the hollow markers of the others
  (so a point that lands on it stays visible), error bars from the 95 % intervals of quality and BE (the
  paper's Figure 4); one panel per temperature and block size.
* :func:`plot_paired` — each point against its baseline on the same problems and seeds: the paired
  difference in quality (95 % interval) against the BE ratio (95 % interval).
* :func:`plot_truncation` — each truncation-based rule beside its matched baseline (speccascade vs minp at the
  same p_base, typical vs eta at the same ε, δ): quality and BE with intervals, the paired Δ and p on top.
"""

from __future__ import annotations

import math
from pathlib import Path

from judgekit.errors import JudgekitError
from judgekit.evaluate.summary import MATCHED_BASELINES, baseline_of

# How a parameter is written next to its point (the rule is the curve's name, so only the value matters).
_SHORT = {"lenience": "ℓ", "lam": "λ", "threshold": "t", "p_base": "p", "epsilon": "ε", "delta": "δ"}
_MARKERS = "osD^vP<>Xph"


def _marker_size(slot: int) -> float:
    """Curves take growing sizes (and their own shapes), so hollow markers on one spot nest, none hidden."""
    return 6.0 + 2.2 * (slot % 5)


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


def point_tag(row: dict) -> str:
    """The parameter label of a point on its curve: "λ=0.5", "t=p50", "ε=0.05 δ=0.9" ('' for lossless)."""
    params = row["params"]
    parts = []
    for k, v in params.items():
        if k in ("judge", "judge_sha", "threshold_name", "divergence"):
            continue
        if k == "threshold" and "threshold_name" in params:
            v = params["threshold_name"]
        parts.append(f"{_SHORT.get(k, k)}={v:g}" if isinstance(v, float) else f"{_SHORT.get(k, k)}={v}")
    return " ".join(parts)


def pair_title(settings: dict | list[dict] | None) -> str:
    """"task: target vs draft" of one evaluation directory's settings (or of several, joined)."""
    if not settings:
        return ""
    many = settings if isinstance(settings, list) else [settings]
    parts = dict.fromkeys(f"{s.get('task', '?')}: {Path(str(s.get('target', '?'))).name} vs "
                          f"{Path(str(s.get('draft', '?'))).name}" for s in many)
    return "; ".join(parts)


def _mode(temp: float, gamma: int) -> str:
    return f"{'greedy' if temp == 0 else f'T={temp:g}'}, γ={gamma}"


def _heading(title: str, pair: str, what: str) -> str:
    first = ": ".join(x for x in (title, what) if x)
    return f"{first}\n{pair}" if pair else first


def _err(values: list[float], cis: list[list[float] | None], scale: float = 1.0) -> list[list[float]]:
    """Asymmetric error bars [[below], [above]] from intervals (0 where an interval is missing)."""
    lo, hi = [], []
    for v, ci in zip(values, cis):
        ok = ci is not None and not any(c is None or math.isnan(c) for c in ci)
        lo.append(scale * max(0.0, v - ci[0]) if ok else 0.0)
        hi.append(scale * max(0.0, ci[1] - v) if ok else 0.0)
    return [lo, hi]


def _colours(plt, names: list[str]) -> dict[str, tuple]:
    palette = plt.get_cmap("tab20" if len(names) > 10 else "tab10")
    return {n: palette(i % palette.N) for i, n in enumerate(names)}


def _merge_tags(tags: list[str]) -> str:
    """Labels of one curve's points that land on one spot, as one label: "λ=0.2, 0.5, 0.8"."""
    keys = {t.split("=", 1)[0] for t in tags}
    if len(keys) == 1 and all(t.count("=") == 1 for t in tags):
        return f"{keys.pop()}={', '.join(t.split('=', 1)[1] for t in tags)}"
    return "; ".join(tags)


def _label_points(ax, xs, ys, tags, colour, slot: int) -> None:
    """Write each point's parameter beside it. Curves take turns around the point (slot), so labels of points
    that coincide (e.g. several rules on the lossless point) do not print over each other, and one curve's
    points on one spot (greedy lenience at every ℓ, say) share one label."""
    spots: dict[tuple, list[str]] = {}
    for x, y, tag in zip(xs, ys, tags):
        if tag:
            spots.setdefault((round(x, 6), round(y, 6)), []).append(tag)
    angle = math.radians(35 + 70 * slot)
    dx, dy = 16 * math.cos(angle), 12 * math.sin(angle)
    for (x, y), group in spots.items():
        ax.annotate(_merge_tags(group), (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=7,
                    color=colour, ha="left" if dx >= 0 else "right", va="center", zorder=8,
                    bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.75})


def plot_tradeoff(rows: list[dict], out: str | Path, title: str = "", settings=None) -> Path:
    """BE (x) against quality (y) with 95 % interval error bars on both; one panel per (temperature, γ)."""
    plt = _pyplot()
    panels = sorted({(r["temperature"], r["block_size"]) for r in rows})
    if not panels:
        raise JudgekitError("nothing to plot: no summary rows")
    fig, axes = plt.subplots(1, len(panels), figsize=(6.6 * len(panels), 5.2), squeeze=False)
    # One colour and marker per curve across all panels, so a rule looks the same greedy and sampled.
    names = list(dict.fromkeys(curve_name(r) for r in rows if r["rule"] != "lossless"))
    colour = _colours(plt, names)
    marker = {n: _MARKERS[i % len(_MARKERS)] for i, n in enumerate(names)}
    pair = pair_title(settings)
    for ax, (temp, gamma) in zip(axes[0], panels):
        curves: dict[str, list[dict]] = {}
        for r in rows:
            if (r["temperature"], r["block_size"]) == (temp, gamma):
                curves.setdefault(curve_name(r), []).append(r)
        for name, pts in curves.items():
            pts = sorted(pts, key=lambda r: (r["block_efficiency"], r["quality"]))  # the curve runs along BE
            x = [r["block_efficiency"] for r in pts]
            y = [100 * r["quality"] for r in pts]
            xerr = _err(x, [r.get("be_ci") for r in pts])
            yerr = _err([r["quality"] for r in pts], [r["quality_ci"] for r in pts], 100)
            if pts[0]["rule"] == "lossless":
                ax.errorbar(x, y, xerr=xerr, yerr=yerr, fmt="*", markersize=21, color="black", ecolor="0.35",
                            capsize=3, label=name, zorder=3)
                continue
            c = colour[name]
            ax.errorbar(x, y, xerr=xerr, yerr=yerr, fmt="-", color=c, alpha=0.5, lw=1.2, capsize=2,
                        elinewidth=0.8, zorder=4)
            # Hollow markers above the star: a point on top of lossless (or of another rule) stays visible.
            ax.plot(x, y, linestyle="none", marker=marker[name], markersize=_marker_size(names.index(name)),
                    markerfacecolor="none",
                    markeredgewidth=1.6, color=c, label=name, zorder=6)
            _label_points(ax, x, y, [point_tag(r) for r in pts], c, names.index(name))
        ax.set_xlabel("block efficiency (tokens per target call, 95 % CI)")
        ax.set_ylabel("quality (% correct, 95 % CI)")
        ax.set_title(_heading(title, pair, _mode(temp, gamma)), fontsize=10)
        ax.grid(alpha=0.3)
        ax.margins(x=0.15, y=0.1)
    _legend(fig, axes[0])
    _declutter(fig, axes[0])
    return _save(fig, out)


def _declutter(fig, axes) -> None:
    """Move point labels that overlap an earlier label to the first free place around their point (eight
    directions, two distances); a label with no free place keeps its first one. A few dozen labels: cheap."""
    renderer = fig.canvas.get_renderer()
    spots = [(math.cos(math.radians(a)), math.sin(math.radians(a))) for a in range(0, 360, 45)]
    for ax in axes:
        placed = []
        for ann in ax.texts:
            first = (ann.xyann, ann.get_ha())
            for offset in [None] + [(r * cx, 0.8 * r * cy) for r in (14, 28) for cx, cy in spots]:
                if offset is not None:  # None: try the label where it was put first
                    ann.xyann = offset
                    ann.set_ha("left" if offset[0] > 0.1 else "right" if offset[0] < -0.1 else "center")
                box = ann.get_window_extent(renderer).expanded(1.05, 1.1)
                if not any(box.overlaps(b) for b in placed):
                    break
            else:
                ann.xyann, ha = first
                ann.set_ha(ha)
                box = ann.get_window_extent(renderer)
            placed.append(box)


def _legend(fig, axes) -> None:
    """One legend for all panels (a curve has one colour and marker everywhere), outside on the right, where
    it hides no point; a fixed place also spares matplotlib's slow search for the 'best' one."""
    handles: dict = {}
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    fig.tight_layout()
    fig.legend(list(handles.values()), list(handles), fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5),
               frameon=False)


def plot_paired(rows: list[dict], out: str | Path, title: str = "", settings=None) -> Path | None:
    """Paired Δ quality (y, points, 95 % CI) against BE / baseline (x, 95 % CI), per (temperature, γ);
    None when no row has a baseline."""
    rows = [r for r in rows if r.get("paired")]
    if not rows:
        return None
    plt = _pyplot()
    panels = sorted({(r["temperature"], r["block_size"]) for r in rows})
    fig, axes = plt.subplots(1, len(panels), figsize=(6.6 * len(panels), 5.2), squeeze=False)
    names = list(dict.fromkeys(curve_name(r) for r in rows))
    colour = _colours(plt, names)
    marker = {n: _MARKERS[i % len(_MARKERS)] for i, n in enumerate(names)}
    pair = pair_title(settings)
    for ax, (temp, gamma) in zip(axes[0], panels):
        ax.axhline(0, color="black", lw=0.8, zorder=1)
        ax.axvline(1, color="black", lw=0.8, zorder=1)
        seen = set()
        for r in sorted((r for r in rows if (r["temperature"], r["block_size"]) == (temp, gamma)),
                        key=lambda r: r["paired"]["be_ratio"] or 0):
            p, name = r["paired"], curve_name(r)
            x, y = p["be_ratio"] or float("nan"), 100 * p["dq"]
            c = colour[name]
            ax.errorbar([x], [y], xerr=_err([x], [p["be_ratio_ci"]]), yerr=_err([p["dq"]], [p["dq_ci"]], 100),
                        fmt=marker[name], markersize=_marker_size(names.index(name)), markerfacecolor="none",
                        markeredgewidth=1.6, color=c, capsize=2, elinewidth=0.8,
                        label=None if name in seen else name, zorder=6)
            seen.add(name)
            # a matched baseline has the same parameters by construction: its rule's name says enough
            against = r["baseline"].split()[0]
            tag = " ".join(x for x in (point_tag(r), f"vs {against}" if against != "lossless" else "") if x)
            _label_points(ax, [x], [y], [tag], c, names.index(name))
        ax.set_xlabel("BE / baseline (95 % CI)")
        ax.set_ylabel("Δ quality vs baseline (points, paired 95 % CI)")
        ax.set_title(_heading(title, pair, f"paired vs baseline, {_mode(temp, gamma)}"), fontsize=10)
        ax.grid(alpha=0.3)
        ax.margins(x=0.15, y=0.1)
    _legend(fig, axes[0])
    _declutter(fig, axes[0])
    return _save(fig, out)


def matched_pairs(rows: list[dict]) -> list[tuple[dict, dict]]:
    """(rule row, baseline row) for each truncation rule whose matched baseline was evaluated alongside."""
    out = []
    for r in rows:
        b = baseline_of(r, rows) if r["rule"] in MATCHED_BASELINES else None
        if b is not None and b["rule"] == MATCHED_BASELINES[r["rule"]][0]:
            out.append((r, b))
    return out


def plot_truncation(rows: list[dict], out: str | Path, title: str = "", settings=None) -> Path | None:
    """Quality and BE (with intervals) of each truncation rule beside its matched baseline, the paired
    difference and McNemar's p written above each pair; None if no pair was evaluated."""
    pairs = matched_pairs(rows)
    if not pairs:
        return None
    plt = _pyplot()
    fig, (axq, axb) = plt.subplots(1, 2, figsize=(max(7.5, 1.8 * len(pairs) + 4.5), 4.9))
    width = 0.38
    xs = list(range(len(pairs)))
    names = []
    for r, b in pairs:
        keys = MATCHED_BASELINES[r["rule"]][1]
        names.append(f"{r['rule']}/{b['rule']}\n" + " ".join(f"{k}={r['params'][k]:g}" for k in keys)
                     + f"\n{_mode(r['temperature'], r['block_size'])}")
    for off, idx, colour, label in ((-width / 2, 0, "tab:red", "truncation rule"),
                                    (width / 2, 1, "tab:blue", "matched baseline")):
        pts = [p[idx] for p in pairs]
        q = [100 * p["quality"] for p in pts]
        axq.bar([x + off for x in xs], q, width, yerr=_err([p["quality"] for p in pts],
                                                           [p["quality_ci"] for p in pts], 100),
                capsize=3, color=colour, label=label)
        be = [p["block_efficiency"] for p in pts]
        axb.bar([x + off for x in xs], be, width, yerr=_err(be, [p.get("be_ci") for p in pts]), capsize=3,
                color=colour, label=label)
    for x, (r, _) in zip(xs, pairs):
        p = r.get("paired")
        if p:
            lo, hi = p["dq_ci"]
            text = f"Δ {100 * p['dq']:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]"
            if p["mcnemar_p"] is not None:
                text += f"\np = {p['mcnemar_p']:.2g}"
            axq.annotate(text, (x, 100 * max(r["quality_ci"][1], 0)), xytext=(0, 6), textcoords="offset points",
                         ha="center", fontsize=7)
    axq.set_ylim(0, 125)
    axb.set_ylim(0, 1.25 * max(max(p["block_efficiency"], (p.get("be_ci") or [0, 0])[1] or 0)
                               for pair in pairs for p in pair))
    for ax, ylabel in ((axq, "quality (% correct, 95 % CI)"), (axb, "block efficiency (95 % CI)")):
        ax.set_xticks(xs)
        ax.set_xticklabels(names, fontsize=7)
        ax.set_ylabel(ylabel)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7, loc="upper right", ncol=2)
    fig.suptitle(_heading(title, pair_title(settings), "truncation rules vs matched baselines"), fontsize=10)
    fig.tight_layout()
    return _save(fig, out)


def _save(fig, out) -> Path:
    """Write a figure as PNG and as vector PDF beside it, atomically (a reader never sees half a plot), and
    free it: matplotlib keeps open figures alive. Returns the PNG's path."""
    import io

    from judgekit.store.atomic import atomic_write_bytes

    plt = _pyplot()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for path, kwargs in ((out, {"format": "png", "dpi": 150}), (out.with_suffix(".pdf"), {"format": "pdf"})):
        buf = io.BytesIO()
        fig.savefig(buf, bbox_inches="tight", **kwargs)  # "tight" keeps the legend beside the panels
        atomic_write_bytes(path, buf.getvalue())
    plt.close(fig)
    return out
