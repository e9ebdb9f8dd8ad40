"""Training a judge head with Lightning (docs/design.md §4): the module, the data module, and `train_one` (one judge directory).

Lightning owns the loops, devices, DDP, early stopping, the progress bar and the CSV logger. What is ours,
and why:

* Batches are *global*: each epoch a seeded permutation is cut into batches of ``batch_size`` rows and
  every rank takes its contiguous slice of each batch; the loss is the class-weighted sum over the rank's
  slice divided by the whole batch's weight, times the world size. DDP averages gradients over ranks, so one
  step on N processes is exactly one step on one process with the same batch: the head does not depend on
  the number of devices (tested with 2 gloo processes on CPU).
* Validation runs on the full validation set on every rank (it is small), so AUROC, early stopping and the
  kept best head agree on all ranks without a reduction.
* A run works in ``.<judge>.train/`` beside its judge directory: Lightning's ModelCheckpoint keeps the best
  head by validation AUROC (``best.ckpt``) and the state to resume from (``last.ckpt``, after every
  epoch), and the logs go there too. ``--resume`` continues from ``last.ckpt`` (the same settings and data
  are required: a run key in ``run.json`` says so); resumed training is the uninterrupted run, step for
  step (the batches are seeded by epoch). The finished judge (safetensors) then replaces the judge
  directory in one rename and the work directory is removed. Checkpoints are torch pickles, so they are
  loaded with ``weights_only=True`` and never leave the work directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler

from judgekit.judge import data as jd
from judgekit.errors import JudgekitError
from judgekit.judge.head import CONFIG_NAME, JUDGE_SCHEMA_VERSION, HeadNet, judge_from_module, output_kind
from judgekit.stale import pid_alive
from judgekit.store.atomic import atomic_write_bytes
from judgekit.judge.metrics import format_metrics, judge_metrics, thresholds
from judgekit.provenance import provenance

try:  # Lightning 2 ships as `lightning`; the standalone `pytorch_lightning` is the same code
    import lightning.pytorch as L
    from lightning.pytorch import loggers as pl_loggers
    from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
except ImportError:  # pragma: no cover
    import pytorch_lightning as L  # type: ignore[no-redef]
    from pytorch_lightning import loggers as pl_loggers  # type: ignore[no-redef]
    from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint  # type: ignore[no-redef]

LOGGERS = ("csv", "tensorboard", "wandb", "none")


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
    log_dir: str | None = None  # logs (default: <out>/logs)
    logger: str = "csv"  # one of LOGGERS
    quiet: bool = False  # no Lightning info, tips or warnings (and no progress bar)

    # What changes the trained head (not where it runs or how it reports): the run key's part of the config.
    RESULT_FIELDS = ("head", "mlp_hidden", "lr", "weight_decay", "batch_size", "max_epochs", "patience", "seed")


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
        self.history: list[dict[str, float]] = []  # kept in checkpoints, so a resumed run reports all epochs

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

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        # EarlyStopping has already run at this validation end (Lightning orders checkpoint callbacks last), so
        # `should_stop` says whether the run ended here: a resumed run that had ended does not train again.
        checkpoint["judgekit"] = {"history": list(self.history), "stopped": bool(self.trainer.should_stop)}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.history = list(checkpoint.get("judgekit", {}).get("history", []))

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


def _make_logger(cfg: TrainConfig, log_dir: Path, resumed: bool):
    """The Lightning logger asked for; a resumed run logs to a new version beside the first one's logs."""
    if cfg.logger not in LOGGERS:
        raise JudgekitError(f"--logger must be one of {', '.join(LOGGERS)}, not {cfg.logger!r}")
    if cfg.logger == "none":
        return False
    version = ""
    if resumed:
        n = 1
        while (log_dir / f"resumed-{n}").exists():
            n += 1
        version = f"resumed-{n}"
    if cfg.logger == "csv":
        return pl_loggers.CSVLogger(str(log_dir), name="", version=version)
    if cfg.logger == "tensorboard":
        try:
            return pl_loggers.TensorBoardLogger(str(log_dir), name="", version=version, default_hp_metric=False)
        except ModuleNotFoundError:
            raise JudgekitError("--logger tensorboard needs tensorboard or tensorboardX: "
                                "pip install tensorboardX") from None
    try:
        return pl_loggers.WandbLogger(save_dir=str(log_dir), project="judgekit", offline=os.environ.get(
            "WANDB_MODE") in ("offline", "disabled"))
    except ModuleNotFoundError:
        raise JudgekitError("--logger wandb needs wandb: pip install wandb (WANDB_MODE=offline logs locally)") from None


@contextlib.contextmanager
def _quiet(enabled: bool):
    """Silence Lightning's info lines, tips and warnings (Python warnings and its loggers) while training."""
    if not enabled:
        yield
        return
    names = ("lightning", "lightning.pytorch", "lightning.fabric", "pytorch_lightning", "lightning_fabric")
    saved = {n: logging.getLogger(n).level for n in names}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in names:
            logging.getLogger(n).setLevel(logging.ERROR)
        try:
            yield
        finally:
            for n, level in saved.items():
                logging.getLogger(n).setLevel(level)


def load_checkpoint(path: Path) -> dict:
    """A Lightning checkpoint of ours, loaded without running arbitrary pickled code (weights_only)."""
    try:
        return torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - torch reports a damaged file in many ways
        raise JudgekitError(f"cannot read the checkpoint {path} ({type(err).__name__}); pass --force to "
                            "start the training over") from None


def _finished(ckpt: dict, cfg: TrainConfig) -> bool:
    return bool(ckpt.get("judgekit", {}).get("stopped")) or int(ckpt.get("epoch", -1)) + 1 >= cfg.max_epochs


def fit_head(data: jd.JudgeData, cfg: TrainConfig, work: Path, log_dir: Path | None = None,
             resume: bool = False) -> tuple[HeadNet, dict, bool]:  # noqa: C901
    """Train on `data` with checkpoints in `work`/checkpoints (resuming from last.ckpt if `resume` and it
    exists); returns the best head by validation AUROC, training info, and whether this is rank 0."""
    if cfg.batch_size < 1 or cfg.max_epochs < 1 or cfg.patience < 1:
        raise JudgekitError("--batch-size, --max-epochs and --patience must be >= 1")
    if cfg.head == "mlp" and cfg.mlp_hidden < 1:
        raise JudgekitError(f"--mlp-hidden must be >= 1 (got {cfg.mlp_hidden}: the head would be a constant)")
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    ckpt_dir = work / "checkpoints"
    last = ckpt_dir / "last.ckpt"
    resumed = resume and last.is_file()
    with _quiet(cfg.quiet):
        L.seed_everything(cfg.seed, workers=True, verbose=False)
        module = JudgeHeadModule(data.spec.size, cfg.head, cfg.mlp_hidden, cfg.lr, cfg.weight_decay, data.y_val)
        mean, std = data.scaler()
        module.set_scaler(mean, std)
        checkpoint = ModelCheckpoint(dirpath=str(ckpt_dir), filename="best", monitor="val_auroc", mode="max",
                                     save_top_k=1, save_last=True, enable_version_counter=False)
        trainer = L.Trainer(
            accelerator=cfg.accelerator, devices=cfg.devices, strategy=cfg.strategy, num_nodes=cfg.num_nodes,
            max_epochs=cfg.max_epochs, logger=_make_logger(cfg, log_dir, resumed) if log_dir else False,
            enable_progress_bar=cfg.progress and not cfg.quiet, enable_model_summary=False, num_sanity_val_steps=0,
            # "warn", not True: a deterministic cuBLAS needs CUBLAS_WORKSPACE_CONFIG, which we set when unset.
            use_distributed_sampler=False, deterministic="warn",
            callbacks=[EarlyStopping("val_auroc", mode="max", patience=cfg.patience, min_delta=1e-4), checkpoint],
            log_every_n_steps=1,
        )
        state = load_checkpoint(last) if resumed else None
        if state is not None and _finished(state, cfg):  # killed after training ended: nothing left to train
            history, epochs_run = state.get("judgekit", {}).get("history", []), int(state["epoch"]) + 1
        else:
            trainer.fit(module, datamodule=JudgeDataModule(data, cfg.batch_size, cfg.seed),
                        ckpt_path=str(last) if resumed else None, weights_only=True if resumed else None)
            history, epochs_run = module.history, trainer.current_epoch
    best = load_checkpoint(ckpt_dir / "best.ckpt")
    net = HeadNet(data.spec.size, cfg.head, cfg.mlp_hidden)
    net.load_state_dict({k[len("net."):]: v for k, v in best["state_dict"].items() if k.startswith("net.")})
    info = {"best_epoch": int(best["epoch"]), "epochs_run": epochs_run,
            "world_size": trainer.world_size, "history": history,
            "resumed": bool(resumed)}
    return net.eval(), info, trainer.is_global_zero


def score(net: HeadNet, x: np.ndarray, chunk: int = 8192) -> np.ndarray:
    with torch.no_grad():
        return np.concatenate([net(torch.from_numpy(x[i: i + chunk].astype(np.float32))).numpy()
                               for i in range(0, len(x), chunk)]) if len(x) else np.zeros(0)


def run_key(data: jd.JudgeData, cfg: TrainConfig) -> str:
    """What identifies a training run's result: the settings that change the head, and the exact rows."""
    sel = data.selection
    rows = hashlib.sha256()
    for r in (*sel.train_rows, *sel.val_rows):
        rows.update(np.asarray(r, dtype=np.int64).tobytes() + b"|")
    payload = {"config": {k: getattr(cfg, k) for k in TrainConfig.RESULT_FIELDS},
               "spec": dataclasses.asdict(data.spec), "mix": [sel.mix_text, sel.budget, sel.unit, sel.quotas],
               "dirs": [r["dirs"] for r in sel.realised], "rows": rows.hexdigest()}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def target_fingerprint(name: str) -> str | None:
    """The target config's fingerprint (judgekit.judge.head.config_fingerprint), read without loading weights;
    None where the config cannot be read here (then a judge checks the target by name and hidden size only)."""
    try:
        from transformers import AutoConfig

        from judgekit.judge.head import config_fingerprint
        from judgekit.models import resolve_model_path

        with _quiet(True):
            return config_fingerprint(AutoConfig.from_pretrained(resolve_model_path(name)))
    except Exception:  # noqa: BLE001 - offline, a hub id not cached, a mined name that is not a model
        return None


def judge_config(data: jd.JudgeData, cfg: TrainConfig, metrics: dict, info: dict, key: str | None = None
                 ) -> dict[str, Any]:
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
        "target_config_sha256": target_fingerprint(spec.target_model),
        "draft_model": spec.draft_model,
        "thresholds": thresholds(metrics),
        "metrics": {k: metrics[k] for k in ("auroc", "average_precision", "n", "important", "per_source")},
        "mix": {"requested": sel.mix_text, "unit": sel.unit, "budget": sel.budget,
                "realised": {r["source"]: r["share"] for r in sel.realised}},
        "data": data.summary(),
        "training": {"lr": cfg.lr, "weight_decay": cfg.weight_decay, "batch_size": cfg.batch_size,
                     "max_epochs": cfg.max_epochs, "patience": cfg.patience, "seed": cfg.seed,
                     "class_weights": dict(zip(("unimportant", "important"), data.class_weights())),
                     "run_key": key, **info},
        "provenance": provenance((spec.target_model, spec.draft_model), [Path(d) / "manifest.json" for r in sel.realised for d in r["dirs"]]),
    }


def _launch_rank() -> str:
    """This process's rank as the launcher set it ("0" before DDP starts its processes, and in them rank 0)."""
    return os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0"))


def work_dir(out: Path) -> Path:
    """Where a run for judge directory `out` keeps its checkpoints and logs until the judge is written."""
    return out.parent / f".{out.name}.train"


def prepare_work(out: Path, key: str, *, resume: bool, force: bool) -> tuple[Path, bool]:
    """Check `out` may be written and set up its work directory: (work, resuming). Refuses, as one error,
    an eval or mining directory, an existing judge without --force, an interrupted run without --resume or
    --force, and a --resume whose run had other settings or data."""
    kind = output_kind(out)
    if kind in ("eval", "mined", "other"):
        what = {"eval": "an evaluation directory", "mined": "a mining directory", "other": "a non-empty directory "
                "that is not a judge"}[kind]
        raise JudgekitError(f"--out {out} is {what}; refusing to write a judge there (choose another --out)")
    work = work_dir(out)
    run_file = work / "run.json"
    if _launch_rank() != "0":  # a DDP process started by rank 0, which has set the work directory up
        return work, resume and (work / "checkpoints" / "last.ckpt").is_file()
    run = _read_json(run_file) if work.exists() else {}
    if work.exists():
        pid = run.get("pid")
        if isinstance(pid, int) and pid != os.getpid() and pid_alive(pid):
            raise JudgekitError(f"another `judgekit train` (pid {pid}) is writing {out} (its work directory is {work})")
        if force:
            shutil.rmtree(work)
            run = {}
        elif not resume:
            raise JudgekitError(f"an interrupted training run for {out} is in {work}; pass --resume to continue it "
                                "or --force to start over")
        elif run.get("key") != key and (run or (work / "checkpoints" / "last.ckpt").is_file()):
            raise JudgekitError(f"the interrupted run in {work} was started with other settings or data; pass "
                                "--force to discard it and start over")
    if kind == "judge" and not force:
        done = _read_json(out / CONFIG_NAME).get("training", {}).get("run_key") == key
        forced_run = run.get("key") == key and run.get("force")  # resuming a run that was started with --force
        if not (resume and (done or forced_run)):
            raise JudgekitError(f"--out {out} already holds a judge; pass --force to replace it")
    resuming = resume and (work / "checkpoints" / "last.ckpt").is_file()
    try:
        work.mkdir(parents=True, exist_ok=True)
        # atomic: a kill while it is written must not leave an empty run.json that reads as other settings
        atomic_write_bytes(run_file, (json.dumps({"key": key, "pid": os.getpid(),
                                                  "force": bool(force or run.get("force"))}) + "\n").encode())
    except OSError as err:
        raise JudgekitError(f"cannot write --out {out}: {err.strerror or err}") from None
    return work, resuming


def _read_json(path: Path) -> dict:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def train_one(data: jd.JudgeData, cfg: TrainConfig, out: str | Path | None, echo=print, *, resume: bool = False,
              force: bool = False) -> TrainResult:
    """Fit, score the validation set, and (on rank 0) write the judge directory (with metrics.json, the
    realised mix, the logs and the card) in one rename. `resume` continues an interrupted run of the same
    settings and data; `force` replaces an existing judge (and discards an interrupted run)."""
    out_path = Path(out) if out is not None else None
    key = run_key(data, cfg)
    if out_path is not None:
        if resume and output_kind(out_path) == "judge" and not (work_dir(out_path)).exists() \
                and _read_json(out_path / CONFIG_NAME).get("training", {}).get("run_key") == key:
            from judgekit.judge.head import load_judge

            judge = load_judge(out_path)  # killed after the judge was written: the run is complete
            echo(f"judge -> {out_path} (already complete)")
            return TrainResult(out_path, judge.config, _read_json(out_path / "metrics.json"), judge.module(),
                               _launch_rank() == "0")
        work, resuming = prepare_work(out_path, key, resume=resume, force=force)
    else:
        work, resuming = Path(tempfile.mkdtemp(prefix="judgekit-train-")), False
    try:
        log_dir = Path(cfg.log_dir) if cfg.log_dir else (work / "logs" if out_path is not None else None)
        if _launch_rank() == "0":  # before DDP starts its processes
            echo(jd.format_realised(data.selection))
        net, info, is_zero = fit_head(data, cfg, work, log_dir, resume=resuming)
        scores = score(net, data.x_val)
        metrics = judge_metrics(scores, data.y_val, data.val_source, data.source_names)
        config = judge_config(data, cfg, metrics, info, key)
        if is_zero:
            echo(format_metrics(metrics))
            if out_path is not None:
                judge_from_module(net, config).save(
                    out_path, files={"metrics.json": json.dumps(metrics, indent=2) + "\n",
                                     "realised_mix.json": json.dumps(data.selection.realised, indent=2) + "\n"},
                    dirs={"logs": work / "logs"} if not cfg.log_dir else {})
                echo(f"judge -> {out_path}")
    except BaseException:
        if out_path is None:
            shutil.rmtree(work, ignore_errors=True)
        raise
    if is_zero or out_path is None:
        shutil.rmtree(work, ignore_errors=True)
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
