"""Lightning head vs scikit-learn LogisticRegression on the same features and split, per source.

Usage (from the repository root):
    PYTHONPATH=. python training/compare_sklearn.py DATA [DATA ...] [--mix 9:1] [--layer L] [--features target]
Prints validation AUROC per source and overall for both (standardised features, class_weight="balanced").
"""

from __future__ import annotations

import argparse

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.preprocessing import StandardScaler

from judgekit.judge import data as jd
from judgekit.judge.train import TrainConfig, score, train_one


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("data", nargs="+")
    ap.add_argument("--mix")
    ap.add_argument("--budget", type=int)
    ap.add_argument("--layer", type=int)
    ap.add_argument("--features", default="target")
    ap.add_argument("--head", default="linear")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-epochs", type=int, default=100)
    ap.add_argument("--patience", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-2)
    args = ap.parse_args()
    sources, split, spec = jd.prepare(args.data, layer=args.layer, features=args.features, seed=args.seed)
    avail = jd.available_units(sources, split, "problems")
    text, mix = (args.mix, jd.parse_mix(args.mix, len(sources))) if args.mix else ("natural", tuple(map(float, avail)))
    data = jd.build_data(sources, jd.select(sources, split, text, mix, args.budget, "problems"), spec)
    res = train_one(data, TrainConfig(head=args.head, progress=False, accelerator="cpu", devices=1, seed=args.seed,
                                      max_epochs=args.max_epochs, patience=args.patience,
                                      batch_size=args.batch_size, lr=args.lr),
                    None, echo=lambda *_: None)
    ours = score(res.net, data.x_val)
    scaler = StandardScaler().fit(data.x_train.astype(np.float64))
    lr = LogisticRegression(class_weight="balanced", max_iter=5000).fit(
        scaler.transform(data.x_train.astype(np.float64)), data.y_train)
    sk = lr.decision_function(scaler.transform(data.x_val.astype(np.float64)))
    print(jd.format_realised(data.selection))
    print(f"{'validation':<20}{'rows':>7}{'important':>10}{'lightning':>11}{'sklearn':>9}")
    groups = [(n, data.val_source == i) for i, n in enumerate(data.source_names)] + [("all", slice(None))]
    for name, m in groups:
        y = data.y_val[m]
        if 0 < y.sum() < len(y):
            print(f"{name:<20}{len(y):>7}{int(y.sum()):>10}{roc_auc_score(y, ours[m]):>11.4f}"
                  f"{roc_auc_score(y, sk[m]):>9.4f}")
        else:
            print(f"{name:<20}{len(y):>7}{int(y.sum()):>10}{'n/a':>11}{'n/a':>9}")


if __name__ == "__main__":
    main()
