"""Summaries of evaluation records: per point quality and block efficiency with 95 % intervals, and each point
beside its baseline on the same problems and seeds (paired difference in quality, McNemar's exact p for
greedy, BE ratio), as Markdown, CSV and JSON rows.

Intervals come from a seeded, vectorised bootstrap over *problems*: a problem's seeds stay together in every
resample (they share the problem's difficulty, so treating them as independent problems would make the
intervals too narrow). The statistic of each resample is a ratio of sums (correct / records, tokens / target
calls, the paired difference summed / paired records), so unequal seed counts per problem are weighted by
their records. One-record-per-problem quality intervals are Wilson's (well-behaved at 0 % and 100 %).
"""

from __future__ import annotations

import functools
import json
import zlib
from dataclasses import dataclass

import numpy as np

# Resamples and seed of every bootstrap interval; the summary states both.
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0

# rule -> its matched baseline (the truncated target verified losslessly) and the parameters that must agree;
# every other rule's baseline is lossless at the same temperature and block size.
MATCHED_BASELINES = {"speccascade": ("minp", ("p_base",)), "typical": ("eta", ("epsilon", "delta"))}

# Table order: collaborative rules, then each truncation rule followed by its matched baseline; rules not
# listed (e.g. added later) follow in registry order.
SUMMARY_ORDER = ("lossless", "lenience", "cos", "cos-adaptive", "cos-ceiling", "cos-ceiling-rescaled", "fuzzy",
                 "judge", "speccascade", "minp", "typical", "eta")


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


# ------------------------------------------------------------------------------------------------ bootstrap


def bootstrap_weights(n: int, resamples: int = BOOTSTRAP_RESAMPLES, seed: int | tuple = BOOTSTRAP_SEED) -> np.ndarray:
    """[resamples, n] counts: how often each of n clusters (problems) is drawn in each resample."""
    rng = np.random.default_rng(seed)
    # One bincount over all resamples at once (several times faster than rng.multinomial row by row).
    draws = rng.integers(0, n, (resamples, n)) + (np.arange(resamples) * n)[:, None]
    return np.bincount(draws.ravel(), minlength=resamples * n).reshape(resamples, n).astype(np.float64)


@functools.lru_cache(maxsize=None)
def expanded_levels(n: int, level: float = 0.95) -> tuple[float, float]:
    """Percentile levels of Hesterberg's expanded percentile interval for n clusters: the plain percentile
    interval is too narrow for small n (it has the plug-in variance, n - 1 over n, and normal rather than t
    tails), so read the percentiles at Phi(-+ sqrt(n / (n - 1)) t_{n-1}) instead of (1 -+ level) / 2
    (T. Hesterberg, "What teachers should know about the bootstrap", Am. Stat. 2015, sec. 6.2)."""
    from scipy.stats import norm, t

    z = np.sqrt(n / (n - 1)) * t.ppf(0.5 + level / 2, n - 1)
    return float(100 * norm.cdf(-z)), float(100 * norm.cdf(z))


def percentile_interval(stats: np.ndarray, n: int) -> tuple[float, float]:
    """95 % expanded percentile interval of bootstrap statistics over n clusters (NaN without two clusters)."""
    stats = stats[np.isfinite(stats)]
    if n < 2 or not len(stats):
        return float("nan"), float("nan")
    lo, hi = np.percentile(stats, expanded_levels(n))
    return float(lo), float(hi)


def ratio_interval(num: np.ndarray, den: np.ndarray, weights: np.ndarray) -> tuple[float, float]:
    """95 % interval of sum(num) / sum(den) under the cluster resamples `weights` [B, n]."""
    top, bottom = weights @ num, weights @ den
    with np.errstate(divide="ignore", invalid="ignore"):
        stats = np.where(bottom > 0, top / np.where(bottom > 0, bottom, 1.0), np.nan)
    return percentile_interval(stats, len(num))


def _cluster_sums(keys: np.ndarray, *columns: np.ndarray) -> list[np.ndarray]:
    """Per-cluster sums of each column (clusters = distinct keys, in sorted order), plus the record counts."""
    _, inverse = np.unique(keys, return_inverse=True)
    n = inverse.max() + 1 if len(inverse) else 0
    return [np.bincount(inverse, weights=c.astype(np.float64), minlength=n) for c in columns] + \
        [np.bincount(inverse, minlength=n).astype(np.float64)]


def _seed_of(*parts: str) -> tuple[int, int]:
    """A bootstrap seed per point (pair): the intervals do not depend on which other rows are in the table."""
    return BOOTSTRAP_SEED, zlib.crc32("\x00".join(parts).encode())


@dataclass(eq=False)
class PointRecords:
    """One summary row's records as arrays (one entry per (problem, seed) record, sorted by both, so the
    same records give the same arrays whatever the order the ranks wrote them in)."""

    problem: np.ndarray  # str
    seed: np.ndarray  # int
    correct: np.ndarray  # bool
    new_tokens: np.ndarray
    target_calls: np.ndarray

    def __eq__(self, other) -> bool:
        return isinstance(other, PointRecords) and all(
            np.array_equal(getattr(self, k), getattr(other, k)) for k in self.__dataclass_fields__)

    @classmethod
    def from_records(cls, records: list[dict]) -> "PointRecords":
        records = sorted(records, key=lambda r: (r["problem"], r["seed"]))
        return cls(np.array([r["problem"] for r in records], dtype=str),
                   np.array([r["seed"] for r in records], dtype=np.int64),
                   np.array([bool(r["correct"]) for r in records]),
                   np.array([r["new_tokens"] for r in records], dtype=np.float64),
                   np.array([r["target_calls"] for r in records], dtype=np.float64))


def point_intervals(pr: PointRecords, seed, resamples: int = BOOTSTRAP_RESAMPLES) -> dict:
    """95 % intervals of one point's quality (Wilson, or the cluster bootstrap when problems have several
    seeds) and block efficiency (cluster bootstrap of tokens / target calls)."""
    correct, tokens, calls, count = _cluster_sums(pr.problem, pr.correct, pr.new_tokens, pr.target_calls)
    w = bootstrap_weights(len(count), resamples, seed)
    rate = correct / count
    if (count == 1).all():
        quality_ci, method = list(wilson(int(pr.correct.sum()), len(pr.correct))), "wilson"
    elif np.ptp(rate) == 0:
        # Every problem has the same success rate (e.g. all seeds of all problems correct): the bootstrap has
        # no spread, so take Wilson's interval at n = problems, the conservative effective sample size.
        quality_ci, method = list(wilson(float(rate[0] * len(count)), len(count))), "wilson-problems"
    else:
        quality_ci, method = list(ratio_interval(correct, count, w)), "bootstrap"
    return {"quality_ci": quality_ci, "quality_ci_method": method,
            "be_ci": list(ratio_interval(tokens, calls, w))}


def paired_stats(a: PointRecords, b: PointRecords, greedy: bool, seed,
                 resamples: int = BOOTSTRAP_RESAMPLES) -> dict | None:
    """Point a against point b on the (problem, seed) records both hold (greedy: the problems both hold;
    greedy decoding does not depend on the seed): the quality difference a - b with its 95 % cluster
    bootstrap interval, McNemar's exact two-sided p (greedy: one record per problem, so the discordant pairs
    are independent), and BE(a) / BE(b) with its interval from the same resamples. None if nothing is shared."""
    from scipy.stats import binomtest

    def keyed(pr):
        keys = pr.problem if greedy else np.char.add(np.char.add(pr.problem, "\x00"), pr.seed.astype(str))
        _, first = np.unique(keys, return_index=True)  # one record per key (greedy: one seed per problem)
        return keys[first], first

    ka, ia = keyed(a)
    kb, ib = keyed(b)
    _, ja, jb = np.intersect1d(ka, kb, assume_unique=True, return_indices=True)
    if not len(ja):
        return None
    ia, ib = ia[ja], ib[jb]
    ca, cb = a.correct[ia], b.correct[ib]
    diff, tok_a, calls_a, tok_b, calls_b, count = _cluster_sums(
        a.problem[ia], ca.astype(np.float64) - cb, a.new_tokens[ia], a.target_calls[ia], b.new_tokens[ib],
        b.target_calls[ib])
    w = bootstrap_weights(len(count), resamples, seed)
    with np.errstate(divide="ignore", invalid="ignore"):
        be_ratio = (w @ tok_a / (w @ calls_a)) / (w @ tok_b / (w @ calls_b))
    be_a, be_b = tok_a.sum() / max(calls_a.sum(), 1.0), tok_b.sum() / max(calls_b.sum(), 1.0)
    a_only, b_only = int((ca & ~cb).sum()), int((~ca & cb).sum())
    p = None
    if greedy:
        p = float(binomtest(a_only, a_only + b_only, 0.5).pvalue) if a_only + b_only else 1.0
    return {"paired_problems": int(len(count)), "paired_records": int(len(ia)),
            "dq": float(diff.sum() / count.sum()), "dq_ci": list(ratio_interval(diff, count, w)),
            "a_only": a_only, "b_only": b_only, "mcnemar_p": p,
            "be_ratio": float(be_a / be_b) if be_b else None,
            "be_ratio_ci": list(percentile_interval(be_ratio, len(count)))}


# -------------------------------------------------------------------------------------------------- summary


def _records(records) -> list[dict]:
    return records.to_pylist() if hasattr(records, "to_pylist") else list(records)


def summarize(records, resamples: int = BOOTSTRAP_RESAMPLES) -> list[dict]:
    """One row per sweep point (seeds pooled): quality and BE (= emitted tokens / target calls summed over the
    records) with 95 % intervals, tokens/s, and the paired comparison with the row's baseline (`baseline`:
    its label; `paired`: :func:`paired_stats`, None without a baseline).

    Rows are ordered by temperature, block size, draft shape (the chain first, then trees by spec), rule
    (SUMMARY_ORDER: each truncation rule next to its matched baseline), then parameters.
    """
    from judgekit.decode.rules import RULES

    groups: dict[str, dict] = {}
    per_point: dict[str, list[dict]] = {}
    for r in _records(records):
        g = groups.setdefault(r["config"], {
            "config": r["config"], "label": r["label"], "rule": r["rule"], "params": json.loads(r["params"]),
            "temperature": r["temperature"], "block_size": r["block_size"], "tree": r.get("tree"),
            "seeds": set(), "problems": set(),
            "n": 0, "correct": 0, "new_tokens": 0, "target_calls": 0, "draft_calls": 0, "wall_time": 0.0,
            "accept_hist": []})
        per_point.setdefault(r["config"], []).append(r)
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
    order = {name: i for i, name in enumerate(dict.fromkeys([*SUMMARY_ORDER, *RULES]))}  # first place wins
    rows = []
    for key, g in groups.items():
        g["arrays"] = PointRecords.from_records(per_point[key])
        rows.append({**g, "seeds": sorted(g["seeds"]), "problems": len(g["problems"]),
                     "quality": g["correct"] / g["n"] if g["n"] else 0.0,
                     "block_efficiency": g["new_tokens"] / g["target_calls"] if g["target_calls"] else 0.0,
                     "tokens_per_s": g["new_tokens"] / g["wall_time"] if g["wall_time"] > 0 else 0.0,
                     **point_intervals(g["arrays"], _seed_of(key), resamples)})
    rows.sort(key=lambda r: (r["temperature"], r["block_size"], r["tree"] or "", order.get(r["rule"], len(order)),
                             json.dumps(r["params"], sort_keys=True)))
    add_paired(rows, resamples)
    return rows


def setting_of(row: dict) -> tuple:
    """What a point and its baseline share: temperature, block size, draft shape (a tree's spec, None for a
    chain) and source directory."""
    return row["temperature"], row["block_size"], row.get("tree"), row.get("source")


def baseline_of(row: dict, rows: list[dict]) -> dict | None:
    """The row a point is compared with: the matched truncation baseline (same temperature, block size, draft
    shape, source and matched parameters) for speccascade / typical, else lossless at the same setting; a
    truncation rule without its matched baseline falls back to lossless. None for lossless. A tree point is
    compared with the same tree, a chain point with the chain."""
    if row["rule"] == "lossless":
        return None
    same = [b for b in rows if b is not row and setting_of(b) == setting_of(row)]
    if row["rule"] in MATCHED_BASELINES:
        base_rule, keys = MATCHED_BASELINES[row["rule"]]
        for b in same:
            if b["rule"] == base_rule and all(b["params"].get(k) == row["params"].get(k) for k in keys):
                return b
    return next((b for b in same if b["rule"] == "lossless"), None)


def compare_rows(a: dict, b: dict, resamples: int = BOOTSTRAP_RESAMPLES) -> dict | None:
    """:func:`paired_stats` of two summary rows (greedy when both were decoded at temperature 0)."""
    greedy = a["temperature"] == 0 and b["temperature"] == 0
    return paired_stats(a["arrays"], b["arrays"], greedy, _seed_of(a["config"], b["config"]), resamples)


def add_paired(rows: list[dict], resamples: int = BOOTSTRAP_RESAMPLES) -> None:
    """Each row's baseline label and paired comparison; also the unpaired ratios to lossless kept for callers."""
    lossless = {setting_of(r): r for r in rows if r["rule"] == "lossless"}
    for r in rows:
        b = baseline_of(r, rows)
        r["baseline"] = b["label"] if b else None
        r["paired"] = compare_rows(r, b, resamples) if b else None
        ll = lossless.get(setting_of(r))
        r["be_vs_lossless"] = (r["block_efficiency"] / ll["block_efficiency"]
                               if ll and ll["block_efficiency"] else None)
        r["quality_vs_lossless"] = r["quality"] - ll["quality"] if ll else None


CSV_COLUMNS = ("label", "rule", "params", "temperature", "block_size", "tree", "seeds", "n", "problems", "correct",
               "quality", "quality_lo", "quality_hi", "block_efficiency", "be_lo", "be_hi", "baseline",
               "paired_problems", "paired_records", "dq", "dq_lo", "dq_hi", "mcnemar_p", "be_ratio",
               "be_ratio_lo", "be_ratio_hi", "be_vs_lossless", "tokens_per_s", "new_tokens", "target_calls",
               "draft_calls", "wall_time")


def _flat(r: dict) -> dict:
    """A row with its intervals split into lo/hi columns and its paired comparison inlined."""
    p = r.get("paired") or {}
    dq_ci, ratio_ci = p.get("dq_ci") or [None, None], p.get("be_ratio_ci") or [None, None]
    return {**r, **{k: p.get(k) for k in ("paired_problems", "paired_records", "dq", "mcnemar_p", "be_ratio")},
            "params": json.dumps(r["params"], sort_keys=True), "seeds": " ".join(map(str, r["seeds"])),
            "quality_lo": r["quality_ci"][0], "quality_hi": r["quality_ci"][1], "be_lo": r["be_ci"][0],
            "be_hi": r["be_ci"][1], "dq_lo": dq_ci[0], "dq_hi": dq_ci[1], "be_ratio_lo": ratio_ci[0],
            "be_ratio_hi": ratio_ci[1]}


def summary_csv(rows: list[dict]) -> str:
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for r in rows:
        flat = _flat(r)
        w.writerow(["" if flat.get(c) is None else flat[c] for c in CSV_COLUMNS])
    return buf.getvalue()


def _p_value(p: float | None) -> str:
    if p is None:
        return ""
    return "<0.001" if p < 0.001 else f"{p:.3f}" if p < 0.1 else f"{p:.2f}"


def paired_cells(p: dict | None) -> tuple[str, str, str]:
    """(Δ quality [CI] in points, McNemar p, BE ratio [CI]) as the summary prints them."""
    if not p:
        return "", "", ""
    lo, hi = p["dq_ci"]
    dq = f"{100 * p['dq']:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]"
    ratio = ""
    if p["be_ratio"] is not None:
        ratio = f"{p['be_ratio']:.2f}×"
        if p["be_ratio_ci"]:
            ratio += f" [{p['be_ratio_ci'][0]:.2f}, {p['be_ratio_ci'][1]:.2f}]"
    return dq, _p_value(p["mcnemar_p"]), ratio


def method_note(resamples: int = BOOTSTRAP_RESAMPLES, delta: str = "point − baseline") -> str:
    """How the table's intervals and p-values were computed (printed under it)."""
    note = (f"95 % intervals: BE, Δ and BE ratio from a bootstrap over problems (a problem's seeds resampled "
            f"together; {resamples} resamples, seed {BOOTSTRAP_SEED}, expanded percentile); quality from "
            "Wilson's interval with one record per problem, else from the same bootstrap (Wilson at n = problems "
            "where every problem has the same success rate, so the bootstrap has no spread). "
            f"Δ = {delta} in points on the problems (and seeds) both hold; p = McNemar's exact "
            "two-sided test (greedy rows).")
    if "baseline" in delta:
        note += (" Baseline = lossless at the same T and γ, or the matched truncation baseline (minp at the same "
                 "p_base for speccascade, eta at the same ε, δ for typical), on the same draft shape (a tree "
                 "point against the same tree).")
    return note


def summary_markdown(rows: list[dict], title: str = "", resamples: int = BOOTSTRAP_RESAMPLES) -> str:
    lines = [f"## {title}", ""] if title else []
    lines += ["| point | T | γ | n | quality [95 % CI] | BE [95 % CI] | baseline | Δ quality [95 % CI] | p | "
              "BE / baseline [95 % CI] | tokens/s |",
              "|---|---:|---:|---:|---|---|---|---|---:|---|---:|"]
    for r in rows:
        lo, hi = r["quality_ci"]
        blo, bhi = r["be_ci"]
        dq, p, ratio = paired_cells(r["paired"])
        lines.append(f"| {r['label']} | {r['temperature']:g} | {r['block_size']} | {r['n']} | "
                     f"{100 * r['quality']:.1f} [{100 * lo:.1f}, {100 * hi:.1f}] | "
                     f"{r['block_efficiency']:.2f} [{blo:.2f}, {bhi:.2f}] | {r['baseline'] or ''} | {dq} | {p} | "
                     f"{ratio} | {r['tokens_per_s']:.0f} |")
    return "\n".join(lines) + "\n\n" + method_note(resamples) + "\n"


JSON_KEYS = ("label", "rule", "params", "temperature", "block_size", "tree", "seeds", "n", "problems", "correct",
             "quality", "quality_ci", "quality_ci_method", "block_efficiency", "be_ci", "baseline", "paired",
             "be_vs_lossless", "quality_vs_lossless", "tokens_per_s", "new_tokens", "target_calls", "draft_calls",
             "wall_time", "accept_hist")


def no_nan(value):
    """NaN (an interval from fewer than two problems) as null, so the JSON stays standard."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: no_nan(v) for k, v in value.items()}
    if isinstance(value, list):
        return [no_nan(v) for v in value]
    return value


def json_rows(rows: list[dict]) -> list[dict]:
    """The rows `judgekit eval --json` prints (no sets, no record arrays)."""
    return [no_nan({k: r[k] for k in JSON_KEYS}) for r in rows]
