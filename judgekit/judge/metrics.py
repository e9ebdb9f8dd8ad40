"""How well a judge separates important from unimportant mismatches, and where to put its threshold.

Scores are P(important); the decoder accepts a mismatch iff score < threshold. For the pXX thresholds
(the XXth percentile of the validation scores, the paper's Tables 2 and 6 use p20/p40/p60/p80) the judge
accepts about XX % of validation mismatches; recallNN is the AutoJudge choice: the largest threshold that
still rejects NN % of the important mismatches. All curve work is scikit-learn's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve

PERCENTILES = (10, 20, 30, 40, 50, 60, 70, 80, 90)
RECALLS = (90, 95)


def _auroc(scores: np.ndarray, labels: np.ndarray) -> float | None:
    return float(roc_auc_score(labels, scores)) if 0 < labels.sum() < len(labels) else None


def _ap(scores: np.ndarray, labels: np.ndarray) -> float | None:
    return float(average_precision_score(labels, scores)) if 0 < labels.sum() < len(labels) else None


def operating_point(scores: np.ndarray, labels: np.ndarray, threshold: float) -> dict[str, float]:
    """Share of mismatches accepted (score < t) and recall of important ones (kept out: score >= t)."""
    important = labels > 0.5
    return {"threshold": float(threshold), "accepted": float((scores < threshold).mean()),
            "recall_important": float((scores[important] >= threshold).mean()) if important.any() else float("nan")}


def recall_threshold(scores: np.ndarray, labels: np.ndarray, recall: float) -> float:
    """The largest threshold t whose recall of important mismatches (score >= t) is at least `recall`."""
    _fpr, tpr, thr = roc_curve(labels, scores)
    idx = int(np.argmax(tpr >= recall - 1e-12))
    return float(thr[idx])


def judge_metrics(scores: np.ndarray, labels: np.ndarray, sources: np.ndarray | None = None,
                  names: list[str] | None = None) -> dict[str, Any]:
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.float64)
    out: dict[str, Any] = {
        "n": int(len(labels)), "important": int(labels.sum()),
        "auroc": _auroc(scores, labels), "average_precision": _ap(scores, labels),
        "percentiles": {f"p{q}": operating_point(scores, labels, float(np.percentile(scores, q)))
                        for q in PERCENTILES},
        "recall_targets": {f"recall{r}": operating_point(scores, labels, recall_threshold(scores, labels, r / 100))
                           for r in RECALLS},
    }
    if sources is not None and names is not None:
        out["per_source"] = {name: {"n": int((sources == i).sum()), "important": int(labels[sources == i].sum()),
                                    "auroc": _auroc(scores[sources == i], labels[sources == i]),
                                    "average_precision": _ap(scores[sources == i], labels[sources == i])}
                             for i, name in enumerate(names)}
    return out


def thresholds(metrics: dict[str, Any]) -> dict[str, float]:
    """{"p10": t, …, "p90": t, "recall90": t, "recall95": t} for the judge config."""
    return {**{k: v["threshold"] for k, v in metrics["percentiles"].items()},
            **{k: v["threshold"] for k, v in metrics["recall_targets"].items()}}


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def format_metrics(m: dict[str, Any]) -> str:
    lines = [f"validation: {m['n']} mismatches, {m['important']} important; AUROC {_fmt(m['auroc'])}, "
             f"average precision {_fmt(m['average_precision'])}"]
    for name, s in m.get("per_source", {}).items():
        lines.append(f"  {name:<20} {s['n']:>7} mismatches, {s['important']:>6} important, AUROC {_fmt(s['auroc'])}, "
                     f"AP {_fmt(s['average_precision'])}")
    lines.append(f"{'threshold':<12}{'P(imp) <':>10}{'accepted':>10}{'recall imp':>12}")
    for name, row in {**m["percentiles"], **m["recall_targets"]}.items():
        lines.append(f"{name:<12}{row['threshold']:>10.4f}{row['accepted']:>10.1%}{row['recall_important']:>12.1%}")
    return "\n".join(lines)
