"""The README's pocket tree table (issue 19): truncation rules against their matched baselines on a chain and on
draft trees of the same depth, from `judgekit eval` directories.

    PYTHONPATH=. python3 eval/tree_table.py DIR [DIR ...] [--trees "2,2,1,1:topk" "2,2,1,1"]

Per draft shape: each pair's paired quality difference and BE ratio (judgekit.evaluate.summary.compare_rows, the
summaries' statistics); per rule: the tree against the chain; and the gap on the tree minus the gap on the
chain per problem (the difference in differences Theorem 1 is about), with the summaries' bootstrap over
problems (judgekit.evaluate.reproduce.paired_difference). Rule settings are those of the README's commands.
"""

from __future__ import annotations

import argparse
import sys

PAIRS = (("speccascade p_base=0.1", "minp p_base=0.1"),
         ("typical epsilon=0.05 delta=0.3", "eta epsilon=0.05 delta=0.3"))


def _ci(value: float, ci, scale: float = 100, fmt: str = "+.1f") -> str:
    return f"{scale * value:{fmt}} [{scale * ci[0]:{fmt}}, {scale * ci[1]:{fmt}}]"


def _ratio(p: dict) -> str:
    return f"{p['be_ratio']:.3f} [{p['be_ratio_ci'][0]:.3f}, {p['be_ratio_ci'][1]:.3f}]"


def _per_problem(row: dict) -> dict[str, float]:
    """A point's mean correctness per problem (its seeds pooled)."""
    out: dict[str, list[float]] = {}
    for prob, c in zip(row["arrays"].problem, row["arrays"].correct):
        out.setdefault(str(prob), []).append(float(c))
    return {k: sum(v) / len(v) for k, v in out.items()}


def main() -> int:
    from judgekit.evaluate.report import load_rows
    from judgekit.evaluate.reproduce import paired_difference
    from judgekit.evaluate.summary import compare_rows

    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--trees", nargs="+", default=["2,2,1,1:topk", "2,2,1,1"])
    args = ap.parse_args()
    rows, _ = load_rows(args.dirs)
    by = {r["label"]: r for r in rows}
    shapes = [("chain", "")] + [(f"tree {t}", f" tree {t}") for t in args.trees]
    print("| draft shape | a − b | paired problems / records | quality a / b | Δ a − b [95 % CI] | BE a / b | "
          "BE a / b [95 % CI] | lossless BE |")
    print("|---|---|---|---|---|---|---|---|")
    for name, suffix in shapes:
        for a, b in PAIRS:
            ra, rb = by[a + suffix], by[b + suffix]
            p = compare_rows(ra, rb)
            print(f"| {name} | {a.split()[0]} − {b.split()[0]} | {p['paired_problems']} / {p['paired_records']} | "
                  f"{100 * ra['quality']:.1f} / {100 * rb['quality']:.1f} | {_ci(p['dq'], p['dq_ci'])} | "
                  f"{ra['block_efficiency']:.2f} / {rb['block_efficiency']:.2f} | {_ratio(p)} | "
                  f"{by['lossless' + suffix]['block_efficiency']:.2f} |")
    print("\n| the same rule, tree − chain | paired problems / records | Δ quality [95 % CI] | BE ratio [95 % CI] |")
    print("|---|---|---|---|")
    for name, suffix in shapes[1:]:
        for rule in ["lossless", *(r for pair in PAIRS for r in pair)]:
            p = compare_rows(by[rule + suffix], by[rule])
            print(f"| {rule}, {name} | {p['paired_problems']} / {p['paired_records']} | {_ci(p['dq'], p['dq_ci'])} | "
                  f"{_ratio(p)} |")
    print("\n| gap on the tree − gap on the chain | problems | (a − b)_tree − (a − b)_chain [95 % CI] |")
    print("|---|---:|---|")
    for name, suffix in shapes[1:]:
        for a, b in PAIRS:
            at, bt, ac, bc = (_per_problem(by[x]) for x in (a + suffix, b + suffix, a, b))
            ids = set(at) & set(bt) & set(ac) & set(bc)
            d = paired_difference({i: [at[i] - bt[i]] for i in ids}, {i: [ac[i] - bc[i]] for i in ids})
            print(f"| {a.split()[0]} − {b.split()[0]}, {name} | {d['n']} | {_ci(d['diff'], (d['lo'], d['hi']))} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
