"""Summaries of evaluation records: per point quality with its interval, block efficiency, tokens/s, as Markdown,
CSV and JSON rows."""

from __future__ import annotations




def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95 % Wilson score interval of a proportion (well-behaved at 0 and n, unlike the normal interval)."""
    if n == 0:
        return 0.0, 1.0
    phat = k / n
    den = 1 + z * z / n
    centre = (phat + z * z / (2 * n)) / den
    half = z * ((phat * (1 - phat) / n + z * z / (4 * n * n)) ** 0.5) / den
    # The interval always contains phat; clamping keeps rounding from putting an end on the wrong side of it.
    return max(0.0, min(phat, centre - half)), min(1.0, max(phat, centre + half))


# Table order: collaborative rules, then each truncation rule followed by its matched baseline; rules not
# listed (e.g. added later) follow in registry order.
SUMMARY_ORDER = ("lossless", "lenience", "cos", "cos-adaptive", "cos-ceiling", "fuzzy", "judge", "speccascade",
                 "minp", "typical", "eta")


def summarize(records) -> list[dict]:
    """One row per sweep point (seeds pooled): quality with its Wilson interval over the records, block
    efficiency = emitted tokens / target calls summed over the records, tokens/s = tokens / decoding time.

    Rows are ordered by temperature, block size, rule (SUMMARY_ORDER: each truncation rule next to its
    matched baseline), then parameters.
    """
    import json

    from judgekit.decode.rules import RULES

    groups: dict[str, dict] = {}
    for r in records.to_pylist() if hasattr(records, "to_pylist") else records:
        g = groups.setdefault(r["config"], {
            "label": r["label"], "rule": r["rule"], "params": json.loads(r["params"]),
            "temperature": r["temperature"], "block_size": r["block_size"], "seeds": set(), "problems": set(),
            "n": 0, "correct": 0, "new_tokens": 0, "target_calls": 0, "draft_calls": 0, "wall_time": 0.0,
            "accept_hist": []})
        g["seeds"].add(r["seed"])
        g["problems"].add(r["problem"])
        g["n"] += 1
        g["correct"] += int(r["correct"])
        for k in ("new_tokens", "target_calls", "draft_calls", "wall_time"):
            g[k] += r[k]
        hist = g["accept_hist"]
        hist.extend([0] * (len(r["accept_hist"]) - len(hist)))
        for i, c in enumerate(r["accept_hist"]):
            hist[i] += c
    order = {name: i for i, name in enumerate([*SUMMARY_ORDER, *RULES])}
    rows = []
    for g in groups.values():
        lo, hi = wilson(g["correct"], g["n"])
        rows.append({**g, "seeds": sorted(g["seeds"]), "problems": len(g["problems"]),
                     "quality": g["correct"] / g["n"] if g["n"] else 0.0, "quality_ci": [lo, hi],
                     "block_efficiency": g["new_tokens"] / g["target_calls"] if g["target_calls"] else 0.0,
                     "tokens_per_s": g["new_tokens"] / g["wall_time"] if g["wall_time"] > 0 else 0.0})
    rows.sort(key=lambda r: (r["temperature"], r["block_size"], order.get(r["rule"], len(order)),
                             json.dumps(r["params"], sort_keys=True)))
    _add_lossless_ratios(rows)
    return rows


def _add_lossless_ratios(rows: list[dict]) -> None:
    """BE relative to the lossless point decoded at the same temperature and block size (when present)."""
    base = {(r["temperature"], r["block_size"]): r for r in rows if r["rule"] == "lossless"}
    for r in rows:
        b = base.get((r["temperature"], r["block_size"]))
        r["be_vs_lossless"] = (r["block_efficiency"] / b["block_efficiency"]
                               if b and b["block_efficiency"] else None)
        r["quality_vs_lossless"] = r["quality"] - b["quality"] if b else None


CSV_COLUMNS = ("label", "rule", "params", "temperature", "block_size", "seeds", "n", "problems", "correct",
               "quality", "quality_lo", "quality_hi", "block_efficiency", "be_vs_lossless", "tokens_per_s",
               "new_tokens", "target_calls", "draft_calls", "wall_time")


def summary_csv(rows: list[dict]) -> str:
    import csv
    import io
    import json

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for r in rows:
        flat = {**r, "params": json.dumps(r["params"], sort_keys=True), "seeds": " ".join(map(str, r["seeds"])),
                "quality_lo": r["quality_ci"][0], "quality_hi": r["quality_ci"][1]}
        w.writerow(["" if flat[c] is None else flat[c] for c in CSV_COLUMNS])
    return buf.getvalue()


def summary_markdown(rows: list[dict], title: str = "") -> str:
    lines = [f"## {title}", ""] if title else []
    lines += ["| rule | T | γ | n | quality [95 % CI] | Δ vs lossless | BE | BE / lossless | tokens/s |",
              "|---|---:|---:|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        lo, hi = r["quality_ci"]
        dq = "" if r["quality_vs_lossless"] is None else f"{100 * r['quality_vs_lossless']:+.1f}"
        ratio = "" if r["be_vs_lossless"] is None else f"{r['be_vs_lossless']:.2f}×"
        lines.append(f"| {r['label']} | {r['temperature']:g} | {r['block_size']} | {r['n']} | "
                     f"{100 * r['quality']:.1f} [{100 * lo:.1f}, {100 * hi:.1f}] | {dq} | "
                     f"{r['block_efficiency']:.2f} | {ratio} | {r['tokens_per_s']:.0f} |")
    return "\n".join(lines) + "\n"


def json_rows(rows: list[dict]) -> list[dict]:
    """The rows `judgekit eval --json` prints (no sets, no per-step histograms)."""
    keys = ("label", "rule", "params", "temperature", "block_size", "seeds", "n", "problems", "correct",
            "quality", "quality_ci", "block_efficiency", "be_vs_lossless", "quality_vs_lossless",
            "tokens_per_s", "new_tokens", "target_calls", "draft_calls", "wall_time", "accept_hist")
    return [{k: r[k] for k in keys} for r in rows]
