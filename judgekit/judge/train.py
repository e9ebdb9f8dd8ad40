"""Training a judge head with Lightning (docs/design.md §4): the module, the data module, and `train`.

Lightning owns the loops, devices, DDP, early stopping, the progress bar and the CSV logger. What is ours,
and why:

* Batches are *global*: each epoch a seeded permutation is cut into batches of ``batch_size`` rows and
  every rank takes its contiguous slice of each batch; the loss is the class-weighted sum over the rank's
  slice divided by the whole batch's weight, times the world size. DDP averages gradients over ranks, so one
  step on N processes is exactly one step on one process with the same batch: the head does not depend on
  the number of devices (tested with 2 gloo processes on CPU).
* Validation runs on the full validation set on every rank (it is small), so AUROC, early stopping and the
  kept best head agree on all ranks without a reduction. No checkpoints are written (they are pickles);
  the best head is kept in memory and saved as safetensors.
"""

from __future__ import annotations

import copy
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler

from judgekit.judge import data as jd
from judgekit.errors import JudgekitError
from judgekit.judge.head import JUDGE_SCHEMA_VERSION, HeadNet, judge_from_module
from judgekit.judge.metrics import format_metrics, judge_metrics, thresholds
from judgekit.provenance import provenance

try:  # Lightning 2 ships as `lightning`; the standalone `pytorch_lightning` is the same code
    import lightning.pytorch as L
    from lightning.pytorch.callbacks import EarlyStopping
    from lightning.pytorch.loggers import CSVLogger
except ImportError:  # pragma: no cover
    import pytorch_lightning as L  # type: ignore[no-redef]
    from pytorch_lightning.callbacks import EarlyStopping  # type: ignore[no-redef]
    from pytorch_lightning.loggers import CSVLogger  # type: ignore[no-redef]


@dataclass
class TrainConfig:
    head: str = "linear"
    mlp_hidden: int = 256
    lr: float = 1e-2
    weight_decay: float = 1e-4
    batch_size: int = 256
    max_epochs: int = 100
    patience: int = 10
    seed: int = 0
    accelerator: str = "auto"
    devices: Any = "auto"
    strategy: str = "auto"
    num_nodes: int = 1
    progress: bool = True
    log_dir: str | None = None  # CSV logs (default: <out>/logs)


# ------------------------------------------------------------------------------------------------- data


@dataclass(frozen=True)
class _Batch:
    rows: np.ndarray  # this rank's rows of the global batch
    denom: float  # total class weight of the global batch


class GlobalBatchSampler(Sampler):
    """Yields, per step, this rank's slice of a seeded global batch (see the module docstring)."""

    def __init__(self, n: int, batch_size: int, weights: np.ndarray, seed: int, world: int = 1, rank: int = 0):
        self.n, self.batch_size, self.weights = n, batch_size, weights
        self.seed, self.world, self.rank, self.epoch = seed, world, rank, 0

    def set_epoch(self, epoch: int) -> None:  # Lightning calls this at the start of every epoch
        self.epoch = epoch

    def __len__(self) -> int:
        full, last = divmod(self.n, self.batch_size)
        return full + (1 if last >= self.world else 0)  # a last batch too small to give every rank a row is dropped

    def __iter__(self):
        perm = np.random.default_rng([self.seed, self.epoch]).permutation(self.n)
        for b in range(len(self)):
            rows = perm[b * self.batch_size: (b + 1) * self.batch_size]
            part = np.array_split(rows, self.world)[self.rank]
            yield _Batch(np.sort(part), float(self.weights[rows].sum()))


class _Rows(Dataset):
    def __init__(self, x: np.ndarray, y: np.ndarray, w: np.ndarray):
        self.x, self.y, self.w = x, y, w

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, batch: _Batch):
        r = batch.rows
        # float16 on disk and in memory; float32 per batch only.
        return (torch.from_numpy(self.x[r].astype(np.float32)), torch.from_numpy(self.y[r]),
                torch.from_numpy(self.w[r].astype(np.float32)), torch.tensor(batch.denom, dtype=torch.float32))


class _ValRows(Dataset):
    def __init__(self, x: np.ndarray, chunk: int = 4096):
        self.x, self.chunk = x, chunk

    def __len__(self) -> int:
        return math.ceil(len(self.x) / self.chunk)

    def __getitem__(self, i: int) -> Tensor:
        return torch.from_numpy(self.x[i * self.chunk: (i + 1) * self.chunk].astype(np.float32))


class JudgeDataModule(L.LightningDataModule):
    """Serves prepared :class:`judgekit.judge.data.JudgeData` (features already selected and loaded)."""

    def __init__(self, data: jd.JudgeData, batch_size: int, seed: int):
        super().__init__()
        self.data, self.batch_size, self.seed = data, batch_size, seed
        w_neg, w_pos = data.class_weights()
        self.weights = np.where(data.y_train > 0.5, w_pos, w_neg).astype(np.float64)

    def train_dataloader(self) -> DataLoader:
        world = self.trainer.world_size if self.trainer else 1
        rank = self.trainer.global_rank if self.trainer else 0
        sampler = GlobalBatchSampler(len(self.data.y_train), self.batch_size, self.weights, self.seed, world, rank)
        return DataLoader(_Rows(self.data.x_train, self.data.y_train, self.weights), sampler=sampler,
                          batch_size=None)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(_ValRows(self.data.x_val), batch_size=None)


# ----------------------------------------------------------------------------------------------- module


class JudgeHeadModule(L.LightningModule):
    """The head (:class:`HeadNet`, scaler included) and its class-weighted logistic loss."""

    def __init__(self, in_features: int, head: str = "linear", mlp_hidden: int = 256, lr: float = 1e-2,
                 weight_decay: float = 1e-4, y_val: np.ndarray | None = None):
        super().__init__()
        self.save_hyperparameters(ignore=["y_val"])
        self.net = HeadNet(in_features, head, mlp_hidden)
        self.y_val = y_val
        self._val_scores: list[Tensor] = []
        self.best_auroc = -1.0
        self.best_epoch = -1
        self.best_state: dict[str, Tensor] | None = None
        self.history: list[dict[str, float]] = []

    def set_scaler(self, mean: np.ndarray, std: np.ndarray) -> None:
        with torch.no_grad():
            self.net.mean.copy_(torch.from_numpy(mean))
            self.net.std.copy_(torch.from_numpy(std))

    def training_step(self, batch, _idx):
        x, y, w, denom = batch
        per_row = torch.nn.functional.binary_cross_entropy_with_logits(self.net.logits(x), y, reduction="none")
        loss = (w * per_row).sum() / denom * self.trainer.world_size
        self.log("train_loss", loss / self.trainer.world_size, on_step=False, on_epoch=True, batch_size=len(y))
        return loss

    def validation_step(self, x, _idx):
        self._val_scores.append(self.net(x).detach().float().cpu())

    def on_validation_epoch_end(self) -> None:
        from sklearn.metrics import roc_auc_score

        scores = torch.cat(self._val_scores).numpy()
        self._val_scores.clear()
        auroc = float(roc_auc_score(self.y_val, scores))
        self.log("val_auroc", auroc, prog_bar=True)
        if self.trainer.sanity_checking:
            return
        self.history.append({"epoch": self.current_epoch, "val_auroc": auroc})
        if auroc > self.best_auroc:
            self.best_auroc, self.best_epoch = auroc, self.current_epoch
            self.best_state = copy.deepcopy({k: v.detach().cpu() for k, v in self.net.state_dict().items()})

    def configure_optimizers(self):
        return torch.optim.AdamW(self.net.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)


# ------------------------------------------------------------------------------------------------ train


@dataclass
class TrainResult:
    out: Path | None
    config: dict[str, Any]
    metrics: dict[str, Any]
    net: HeadNet
    is_global_zero: bool


def fit_head(data: jd.JudgeData, cfg: TrainConfig, log_dir: str | Path | None = None) -> tuple[HeadNet, dict, bool]:
    """Train on `data`; returns the best head (by validation AUROC), training info, and whether rank 0."""
    if cfg.batch_size < 1 or cfg.max_epochs < 1 or cfg.patience < 1:
        raise JudgekitError("--batch-size, --max-epochs and --patience must be >= 1")
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    module = JudgeHeadModule(data.spec.size, cfg.head, cfg.mlp_hidden, cfg.lr, cfg.weight_decay, data.y_val)
    mean, std = data.scaler()
    module.set_scaler(mean, std)
    logger = CSVLogger(str(log_dir), name="", version="") if log_dir else False
    trainer = L.Trainer(
        accelerator=cfg.accelerator, devices=cfg.devices, strategy=cfg.strategy, num_nodes=cfg.num_nodes,
        max_epochs=cfg.max_epochs, logger=logger, enable_checkpointing=False,
        enable_progress_bar=cfg.progress, enable_model_summary=False, num_sanity_val_steps=0,
        # "warn", not True: a deterministic cuBLAS needs CUBLAS_WORKSPACE_CONFIG, which we set when unset.
        use_distributed_sampler=False, deterministic="warn",
        callbacks=[EarlyStopping("val_auroc", mode="max", patience=cfg.patience, min_delta=1e-4)],
        log_every_n_steps=1,
    )
    trainer.fit(module, datamodule=JudgeDataModule(data, cfg.batch_size, cfg.seed))
    net = HeadNet(data.spec.size, cfg.head, cfg.mlp_hidden)
    net.load_state_dict(module.best_state if module.best_state is not None else module.net.state_dict())
    info = {"best_epoch": module.best_epoch, "epochs_run": trainer.current_epoch,
            "world_size": trainer.world_size, "history": module.history}
    return net.eval(), info, trainer.is_global_zero


def score(net: HeadNet, x: np.ndarray, chunk: int = 8192) -> np.ndarray:
    with torch.no_grad():
        return np.concatenate([net(torch.from_numpy(x[i: i + chunk].astype(np.float32))).numpy()
                               for i in range(0, len(x), chunk)]) if len(x) else np.zeros(0)


def judge_config(data: jd.JudgeData, cfg: TrainConfig, metrics: dict, info: dict) -> dict[str, Any]:
    spec, sel = data.spec, data.selection
    return {
        "schema_version": JUDGE_SCHEMA_VERSION,
        "head": cfg.head,
        "mlp_hidden": cfg.mlp_hidden if cfg.head == "mlp" else None,
        "layer": spec.layer,
        "features": spec.features,
        "hidden_size": spec.hidden_size,
        "draft_hidden_size": spec.draft_hidden_size,
        "target_model": spec.target_model,
        "draft_model": spec.draft_model,
        "thresholds": thresholds(metrics),
        "metrics": {k: metrics[k] for k in ("auroc", "average_precision", "n", "important", "per_source")},
        "mix": {"requested": sel.mix_text, "unit": sel.unit, "budget": sel.budget,
                "realised": {r["source"]: r["share"] for r in sel.realised}},
        "data": data.summary(),
        "training": {"lr": cfg.lr, "weight_decay": cfg.weight_decay, "batch_size": cfg.batch_size,
                     "max_epochs": cfg.max_epochs, "patience": cfg.patience, "seed": cfg.seed,
                     "class_weights": dict(zip(("unimportant", "important"), data.class_weights())), **info},
        "provenance": provenance((spec.target_model, spec.draft_model), [Path(d) / "manifest.json" for r in sel.realised for d in r["dirs"]]),
    }


def train_one(data: jd.JudgeData, cfg: TrainConfig, out: str | Path | None, echo=print) -> TrainResult:
    """Fit, score the validation set, and (on rank 0) write the judge directory and metrics.json."""
    out_path = Path(out) if out is not None else None
    log_dir = cfg.log_dir or (out_path / "logs" if out_path else None)
    if os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0")) == "0":  # before DDP starts its processes
        echo(jd.format_realised(data.selection))
    net, info, is_zero = fit_head(data, cfg, log_dir)
    scores = score(net, data.x_val)
    metrics = judge_metrics(scores, data.y_val, data.val_source, data.source_names)
    config = judge_config(data, cfg, metrics, info)
    if is_zero:
        echo(format_metrics(metrics))
        if out_path is not None:
            judge = judge_from_module(net, config)
            judge.save(out_path)
            (out_path / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
            (out_path / "realised_mix.json").write_text(json.dumps(data.selection.realised, indent=2) + "\n")
            echo(f"judge -> {out_path}")
    return TrainResult(out_path, config, metrics, net, is_zero)


def sweep_summary(rows: list[dict[str, Any]], names: list[str]) -> str:
    head = f"{'mix':<10}{'budget':>8}" + "".join(f"{n[:14]:>16}" for n in names) + f"{'AUROC':>9}{'AP':>8}"
    head += "".join(f"{'AUROC ' + n[:10]:>18}" for n in names)
    lines = [head]
    for r in rows:
        shares = "".join(f"{r['shares'][n]:>16.1%}" for n in names)
        per = "".join(f"{(r['per_source'][n] if r['per_source'][n] is not None else float('nan')):>18.4f}"
                      for n in names)
        lines.append(f"{r['mix']:<10}{r['budget']:>8}{shares}{r['auroc']:>9.4f}{r['average_precision']:>8.4f}{per}")
    return "\n".join(lines)
