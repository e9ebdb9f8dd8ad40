"""`judgekit compare`: two points of one or more eval directories, paired on the problems and seeds both hold."""

from __future__ import annotations

import json

from judgekit.errors import JudgekitError


def find_points(rows: list[dict], point: str, temperature: float | None, block_size: int | None) -> list[dict]:
    """Rows whose label (as the summary prints it, or "SOURCE: label" with several directories) is `point`,
    at the given temperature / block size if set."""
    got = [r for r in rows if point in (r["label"], f"{r.get('source')}: {r['label']}")
           and (temperature is None or r["temperature"] == temperature)
           and (block_size is None or r["block_size"] == block_size)]
    if not got:
        labels = ", ".join(dict.fromkeys(r["label"] if not r.get("source") else f"{r['source']}: {r['label']}"
                                         for r in rows))
        raise JudgekitError(f"no point {point!r}"
                            + (f" at T={temperature:g}" if temperature is not None else "")
                            + (f" γ={block_size}" if block_size is not None else "") + f"; points: {labels}")
    return got


def matched(a_rows: list[dict], b_rows: list[dict]) -> list[tuple[dict, dict]]:
    """(a, b) at each temperature and block size both points were decoded at; one row per side and setting
    (several directories holding the same label must be told apart with "SOURCE: label")."""
    def by_setting(rows, side):
        out: dict = {}
        for r in rows:
            key = (r["temperature"], r["block_size"])
            if key in out:
                raise JudgekitError(f"--{side} {r['label']!r} is in several directories; name it as "
                                    f"'{r.get('source')}: {r['label']}'")
            out[key] = r
        return out

    a, b = by_setting(a_rows, "a"), by_setting(b_rows, "b")
    shared = sorted(set(a) & set(b))
    if not shared:
        raise JudgekitError("the two points share no temperature and block size: "
                            f"a at {sorted(a)}, b at {sorted(b)}")
    return [(a[k], b[k]) for k in shared]


def _ci(value: float, ci, scale: float = 100.0, fmt: str = ".1f") -> str:
    return f"{scale * value:{fmt}} [{scale * ci[0]:{fmt}}, {scale * ci[1]:{fmt}}]"


def comparison_table(results: list[dict], a: str, b: str, resamples: int) -> str:
    from judgekit.evaluate.summary import method_note, paired_cells

    lines = [f"a = {a}; b = {b}", "",
             "| T | γ | paired problems / records | a quality [95 % CI] | b quality [95 % CI] | "
             "Δ a − b [95 % CI] | "
             "p | a BE [95 % CI] | b BE [95 % CI] | BE a / b [95 % CI] |",
             "|---:|---:|---|---|---|---|---:|---|---|---|"]
    for res in results:
        ra, rb, p = res["a"], res["b"], res["paired"]
        dq, pv, ratio = paired_cells(p)
        lines.append(f"| {ra['temperature']:g} | {ra['block_size']} | {p['paired_problems']} / "
                     f"{p['paired_records']} | {_ci(ra['quality'], ra['quality_ci'])} | "
                     f"{_ci(rb['quality'], rb['quality_ci'])} | {dq} | {pv} | "
                     f"{_ci(ra['block_efficiency'], ra['be_ci'], 1, '.2f')} | "
                     f"{_ci(rb['block_efficiency'], rb['be_ci'], 1, '.2f')} | {ratio} |")
    return "\n".join(lines) + "\n\n" + method_note(resamples, delta="a − b") + "\n"


def run(args) -> int:
    from judgekit.evaluate.report import load_rows
    from judgekit.evaluate.summary import BOOTSTRAP_RESAMPLES, compare_rows, no_nan

    if args.resamples is None:
        args.resamples = BOOTSTRAP_RESAMPLES
    if args.resamples < 100:
        raise JudgekitError(f"--resamples must be >= 100, got {args.resamples}")
    rows, _ = load_rows(args.dirs)
    pairs = matched(find_points(rows, args.a, args.temperature, args.block_size),
                    find_points(rows, args.b, args.temperature, args.block_size))
    results = []
    for ra, rb in pairs:
        paired = compare_rows(ra, rb, args.resamples)
        if paired is None:
            raise JudgekitError(f"{args.a!r} and {args.b!r} share no problem at T={ra['temperature']:g} "
                                f"γ={ra['block_size']}")
        results.append({"a": ra, "b": rb, "paired": paired})
    if args.json:
        keep = ("label", "temperature", "block_size", "n", "quality", "quality_ci", "block_efficiency", "be_ci")
        print(json.dumps(no_nan([{"a": {k: r["a"][k] for k in keep}, "b": {k: r["b"][k] for k in keep},
                                  "paired": r["paired"], "resamples": args.resamples} for r in results])))
    else:
        print(comparison_table(results, args.a, args.b, args.resamples), end="")
    return 0


def register(sub) -> None:
    p = sub.add_parser("compare", help="paired comparison of two points of eval directories",
                       description="Point a against point b on the problems and seeds both hold: quality of "
                                   "each, the difference a − b with a 95%% interval from a bootstrap over "
                                   "problems (seeds resampled with their problem), McNemar's exact p for "
                                   "greedy points, block efficiency of each and their ratio with intervals. "
                                   "One line per temperature and block size both points were decoded at.")
    p.add_argument("dirs", nargs="+", help="evaluation directories written by `judgekit eval`")
    p.add_argument("--a", required=True, metavar="POINT",
                   help="the point label as the summary prints it (e.g. 'lenience lenience=0.5'); with several "
                        "directories a label found in more than one is named 'DIR: label'")
    p.add_argument("--b", required=True, metavar="POINT", help="the point to compare against (e.g. lossless)")
    p.add_argument("--temperature", type=float, help="only this temperature (default: every shared one)")
    p.add_argument("--block-size", type=int, help="only this block size (default: every shared one)")
    p.add_argument("--resamples", type=int,
                   help="bootstrap resamples (default 2000, as in the summary; the seed is fixed, so reruns agree)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.set_defaults(func=run)
