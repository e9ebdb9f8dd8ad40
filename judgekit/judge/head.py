"""A saved judge head: safetensors weights + JSON config, applied to the verify forward's hidden states.

A judge directory holds ``judge.safetensors`` (the head and its standardisation statistics) and
``judge_config.json``, which records everything needed to use the head correctly (docs/design.md §4):

* the feature spec: ``layer`` (the index into transformers' ``hidden_states`` exactly as
  ``judgekit mine --layers`` names it), ``features`` (``"target"`` or ``"target+draft"``), ``hidden_size``
  and ``draft_hidden_size``; the decoder reads the layer and features from here, not from its caller;
* the target and draft identity (names, and ``target_config_sha256``: a fingerprint of the target's config),
  so a head is refused on another model, not only on one whose hidden size differs;
* ``weights_sha256``: the sha256 of ``judge.safetensors``, checked on every load (a flipped bit is an error);
* ``thresholds`` on P(important) (``p10`` … ``p90``: percentiles of the validation scores; ``recall90`` /
  ``recall95``: the largest threshold keeping that recall of important mismatches), the metrics, the
  realised training mix and a data summary.

Judges written before these keys existed (no ``schema_version``) still load: layer -1, target features;
a schema-3 judge must carry its weights' hash. Every config is validated on load (types, known schema).

A judge directory is written whole or not at all (:func:`write_judge_dir`): the files go to a temporary
directory beside it, which then replaces it in one rename. The directory also holds a judge card
(``README.md``: pair, data, mix, metrics, thresholds), so a judge pushed to a model hub describes itself.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import hashlib
import json
import math
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch
from torch import Tensor, nn

from judgekit.errors import JudgekitError
from judgekit.stale import sweep_stale

CONFIG_NAME = "judge_config.json"
WEIGHTS_NAME = "judge.safetensors"
CARD_NAME = "README.md"
JUDGE_SCHEMA_VERSION = 3
SCHEMA_VERSIONS = (1, 2, 3)  # 1: no version key (layer -1, target features); 3: weights_sha256 required
FEATURES = ("target", "target+draft")
FOREIGN_ENV = "JUDGEKIT_ALLOW_FOREIGN_JUDGE"  # =1: use a judge on a target other than the one it was trained for


class HeadNet(nn.Module):
    """The head as a torch module: standardisation included, features [n, F] -> P(important) [n].

    Training (Lightning) and export (TorchScript / ONNX) both use this module, so the exported graph is the
    trained function itself, scaler included.
    """

    def __init__(self, in_features: int, head: str = "linear", mlp_hidden: int = 256):
        super().__init__()
        if head not in ("linear", "mlp"):
            raise JudgekitError(f"unknown head {head!r}; choose linear or mlp")
        self.head = head
        self.register_buffer("mean", torch.zeros(in_features))
        self.register_buffer("std", torch.ones(in_features))
        if head == "linear":
            self.body = nn.Linear(in_features, 1)
        else:
            self.body = nn.Sequential(nn.Linear(in_features, mlp_hidden), nn.ReLU(), nn.Linear(mlp_hidden, 1))

    def logits(self, x: Tensor) -> Tensor:
        return self.body((x.float() - self.mean) / self.std).squeeze(-1)

    def forward(self, x: Tensor) -> Tensor:
        return torch.sigmoid(self.logits(x))


class _JudgeBase:
    """Shared behaviour of the saved heads: feature assembly, device moves, config accessors."""

    config: dict
    mean: Tensor

    @property
    def features(self) -> str:
        return str(self.config.get("features", "target"))

    @property
    def uses_draft(self) -> bool:
        return self.features == "target+draft"

    @property
    def layer(self) -> int:
        return int(self.config.get("layer", -1))

    @property
    def feature_size(self) -> int:
        return int(self.mean.shape[0])

    @property
    def draft_hidden_size(self) -> int | None:
        return int(self.config["draft_hidden_size"]) if self.uses_draft else None

    @property
    def hidden_size(self) -> int:
        """The target hidden size the head reads (the feature size minus the draft part, if any)."""
        return self.feature_size - (self.draft_hidden_size or 0)

    def assemble(self, hidden: Tensor, draft_hidden: Tensor | None = None) -> Tensor:
        """The feature matrix the head was trained on: target hidden, then the draft's if configured."""
        if not self.uses_draft:
            return hidden.float()
        if draft_hidden is None:
            raise JudgekitError("this judge reads target+draft features but no draft hidden state was given")
        return torch.cat([hidden.float(), draft_hidden.float()], -1)

    def to(self, device):
        moved = {f.name: getattr(self, f.name).to(device) for f in dataclasses.fields(self)  # type: ignore[arg-type]
                 if isinstance(getattr(self, f.name), Tensor)}
        return dataclasses.replace(self, **moved)  # type: ignore[type-var]

    def __call__(self, hidden: Tensor, tokens: Tensor | None = None, draft_hidden: Tensor | None = None) -> Tensor:
        z = (self.assemble(hidden, draft_hidden) - self.mean) / self.std  # type: ignore[attr-defined]
        return torch.sigmoid(self._logits(z))

    def _logits(self, z: Tensor) -> Tensor:
        raise NotImplementedError

    def _tensors(self) -> dict[str, Tensor]:
        raise NotImplementedError

    def module(self) -> HeadNet:
        """This head as a :class:`HeadNet` (for export); gives the same scores as calling the judge."""
        raise NotImplementedError

    def save(self, path: str | Path, *, files: Mapping[str, str] | None = None,
             dirs: Mapping[str, Path] | None = None) -> None:
        """Write the judge directory atomically (old or new, never a mix): weights, their sha256 in the
        config, the card, and `files` (name -> text) / `dirs` (name -> a directory moved in, e.g. logs)."""
        from safetensors.torch import save_file

        with write_judge_dir(Path(path)) as tmp:
            save_file({k: v.contiguous().float().cpu() for k, v in self._tensors().items()}, str(tmp / WEIGHTS_NAME))
            config = {**self.config, "hidden_size": self.hidden_size,
                      "weights_sha256": file_sha256(tmp / WEIGHTS_NAME)}
            (tmp / CONFIG_NAME).write_text(json.dumps(config, indent=2) + "\n")
            (tmp / CARD_NAME).write_text(judge_card(config))
            for name, text in (files or {}).items():
                (tmp / name).write_text(text)
            for name, src in (dirs or {}).items():
                if Path(src).is_dir():
                    shutil.move(str(src), str(tmp / name))


@dataclass
class LinearJudge(_JudgeBase):
    """Logistic head on standardised features: P(important) = sigmoid(w . (x - mean) / std + b)."""

    weight: Tensor  # [F]
    bias: Tensor  # []
    mean: Tensor  # [F]
    std: Tensor  # [F]
    config: dict

    def _logits(self, z: Tensor) -> Tensor:
        return z @ self.weight + self.bias

    def _tensors(self) -> dict[str, Tensor]:
        return {"weight": self.weight, "bias": self.bias.reshape(1), "mean": self.mean, "std": self.std}

    def module(self) -> HeadNet:
        net = HeadNet(self.feature_size, "linear")
        with torch.no_grad():
            net.mean.copy_(self.mean)
            net.std.copy_(self.std)
            net.body.weight.copy_(self.weight.reshape(1, -1))
            net.body.bias.copy_(self.bias.reshape(1))
        return net.eval()


@dataclass
class MLPJudge(_JudgeBase):
    """One-hidden-layer ReLU head on standardised features."""

    w1: Tensor  # [D, F]
    b1: Tensor  # [D]
    w2: Tensor  # [D]
    b2: Tensor  # []
    mean: Tensor  # [F]
    std: Tensor  # [F]
    config: dict

    def _logits(self, z: Tensor) -> Tensor:
        return torch.relu(z @ self.w1.T + self.b1) @ self.w2 + self.b2

    def _tensors(self) -> dict[str, Tensor]:
        return {"w1": self.w1, "b1": self.b1, "w2": self.w2, "b2": self.b2.reshape(1), "mean": self.mean,
                "std": self.std}

    def module(self) -> HeadNet:
        net = HeadNet(self.feature_size, "mlp", int(self.w1.shape[0]))
        with torch.no_grad():
            net.mean.copy_(self.mean)
            net.std.copy_(self.std)
            net.body[0].weight.copy_(self.w1)
            net.body[0].bias.copy_(self.b1)
            net.body[2].weight.copy_(self.w2.reshape(1, -1))
            net.body[2].bias.copy_(self.b2.reshape(1))
        return net.eval()


TrainedJudge = LinearJudge | MLPJudge


def judge_from_module(net: HeadNet, config: dict) -> TrainedJudge:
    """The saved-judge form of a trained :class:`HeadNet`."""
    sd = {k: v.detach().float().cpu().clone() for k, v in net.state_dict().items()}
    if net.head == "linear":
        return LinearJudge(sd["body.weight"].reshape(-1), sd["body.bias"].reshape(()), sd["mean"], sd["std"],
                           config)
    return MLPJudge(sd["body.0.weight"], sd["body.0.bias"], sd["body.2.weight"].reshape(-1),
                    sd["body.2.bias"].reshape(()), sd["mean"], sd["std"], config)


# ------------------------------------------------------------------------------------------- config


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and math.isfinite(v)


def validate_config(config: Any, where: str) -> None:
    """Refuse a config whose keys have the wrong types or an unknown schema, naming the file (`where`)."""
    def bad(msg: str):
        raise JudgekitError(f"invalid judge config {where}: {msg}")

    if not isinstance(config, dict):
        bad("not a JSON object")
    version = config.get("schema_version", 1)
    if not _is_int(version) or version not in SCHEMA_VERSIONS:
        bad(f"unknown schema_version {version!r} (this judgekit reads {', '.join(map(str, SCHEMA_VERSIONS))}; "
            "a newer judgekit wrote it?)")
    if version >= 3 and "weights_sha256" not in config:
        bad("schema 3 needs weights_sha256 (the hash of the weights)")
    checks = {
        "layer": (_is_int, "an integer"),
        "hidden_size": (lambda v: _is_int(v) and v > 0, "a positive integer"),
        "draft_hidden_size": (lambda v: v is None or (_is_int(v) and v > 0), "null or a positive integer"),
        "features": (lambda v: v in FEATURES, f"one of {', '.join(FEATURES)}"),
        "head": (lambda v: v in ("linear", "mlp"), "linear or mlp"),
        "mlp_hidden": (lambda v: v is None or (_is_int(v) and v > 0), "null or a positive integer"),
        "target_model": (lambda v: v is None or isinstance(v, str), "a string"),
        "draft_model": (lambda v: v is None or isinstance(v, str), "a string"),
        "target_config_sha256": (lambda v: v is None or bool(re.fullmatch(r"[0-9a-f]{64}", str(v))),
                                 "null or 64 hex digits"),
        "weights_sha256": (lambda v: isinstance(v, str) and bool(re.fullmatch(r"[0-9a-f]{64}", v)), "64 hex digits"),
        "thresholds": (lambda v: isinstance(v, dict) and all(isinstance(k, str) and _is_number(x) and 0 <= x <= 1
                                                             for k, x in v.items()),
                       "an object of named numbers in [0, 1]"),
        "metrics": (lambda v: isinstance(v, dict), "an object"),
        "mix": (lambda v: isinstance(v, dict), "an object"),
        "data": (lambda v: isinstance(v, dict), "an object"),
        "training": (lambda v: isinstance(v, dict), "an object"),
    }
    for key, (ok, what) in checks.items():
        if key in config and not ok(config[key]):
            bad(f"{key} must be {what}, not {config[key]!r}")


def normalise_config(config: dict, feature_size: int) -> dict:
    """Fill the keys old-format judges lack (layer -1, target features) and check the feature spec."""
    config = dict(config)
    config.setdefault("layer", -1)
    config.setdefault("features", "target")
    config.setdefault("draft_hidden_size", None)
    if config["features"] not in FEATURES:
        raise JudgekitError(f"unknown judge features {config['features']!r}; expected one of {', '.join(FEATURES)}")
    if config["features"] == "target+draft":
        if not config.get("draft_hidden_size") or not config.get("hidden_size"):
            raise JudgekitError("a target+draft judge needs hidden_size and draft_hidden_size in its config")
        if config["hidden_size"] + config["draft_hidden_size"] != feature_size:
            raise JudgekitError(f"judge weights have {feature_size} features, config says "
                                f"{config['hidden_size']} + {config['draft_hidden_size']}")
    config.setdefault("hidden_size", feature_size)
    if int(config["hidden_size"]) != feature_size - (config["draft_hidden_size"] or 0):
        raise JudgekitError(f"judge weights have {feature_size} features, config says hidden size "
                            f"{config['hidden_size']}")
    return config


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ------------------------------------------------------------------------------------------ loading

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w./-]+)?$")


def resolve_judge_dir(spec: str | Path) -> Path:
    """A local judge directory, or a hub repo id (``owner/name[@revision]``, when no such local path exists)
    downloaded with ``huggingface_hub.snapshot_download`` (honours HF_HUB_OFFLINE and the local cache)."""
    path = Path(spec)
    if path.exists() or not _HUB_ID.match(str(spec)):
        return path
    repo, _, revision = str(spec).partition("@")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id=repo, revision=revision or None))
    except Exception as err:  # noqa: BLE001 - hub errors (offline, not found, auth) come in many types
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise JudgekitError(f"{spec} is neither a local judge directory nor a judge on the hub ({first})") from None


def load_judge(path: str | Path) -> TrainedJudge:
    """Load, validate and hash-check a judge directory (or hub id); any defect is one JudgekitError."""
    from safetensors.torch import load_file

    path = resolve_judge_dir(path)
    if not (path / CONFIG_NAME).exists() or not (path / WEIGHTS_NAME).exists():
        raise JudgekitError(f"{path} is not a judge directory (needs {CONFIG_NAME} and {WEIGHTS_NAME})")
    try:
        config = json.loads((path / CONFIG_NAME).read_text())
    except (OSError, ValueError) as err:
        raise JudgekitError(f"corrupt judge config {path / CONFIG_NAME}: {err}") from None
    validate_config(config, str(path / CONFIG_NAME))
    if "weights_sha256" in config and file_sha256(path / WEIGHTS_NAME) != config["weights_sha256"]:
        raise JudgekitError(f"corrupt judge weights {path / WEIGHTS_NAME}: their sha256 differs from the "
                            f"weights_sha256 in {CONFIG_NAME} (damaged or edited; retrain or restore the judge)")
    try:
        t = load_file(str(path / WEIGHTS_NAME))
        if "w1" in t:
            judge: TrainedJudge = MLPJudge(t["w1"], t["b1"], t["w2"], t["b2"].reshape(()), t["mean"], t["std"],
                                           config)
        else:
            judge = LinearJudge(t["weight"], t["bias"].reshape(()), t["mean"], t["std"], config)
    except Exception as err:  # noqa: BLE001 - safetensors and IO report corruption in different types
        raise JudgekitError(f"corrupt judge at {path}: {err}") from None
    judge.config = normalise_config(config, judge.feature_size)
    return judge


# ------------------------------------------------------------------------------------------- writing


def _exchange(a: Path, b: Path) -> bool:
    """Swap two directories in one atomic rename (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    return False


def _is_judge_dir(path: Path) -> bool:
    return (path / CONFIG_NAME).is_file()


def output_kind(path: Path) -> str | None:
    """What an existing output directory already is ("judge", "eval", "mined", "other") or None if absent/empty.
    (A small local check of the store's markers; judgekit.store's directory helpers can replace it.)"""
    if not path.exists():
        return None
    if not path.is_dir():
        return "other"
    if _is_judge_dir(path):
        return "judge"
    if (path / "eval.json").exists():
        return "eval"
    if (path / "manifest.json").exists():
        return "mined"
    return "other" if any(path.iterdir()) else None


@contextlib.contextmanager
def write_judge_dir(path: Path) -> Iterator[Path]:
    """Yield a fresh temporary directory beside `path`; on success it replaces `path` in one rename (an
    atomic exchange where the OS has one), so `path` is always the old judge or the new one, whole.
    Refuses to replace anything but a judge directory or an empty one."""
    kind = output_kind(path)
    if kind not in (None, "judge"):
        raise JudgekitError(f"{path} is {'an ' + kind if kind == 'eval' else 'a ' + kind} directory, not a judge; "
                            "refusing to replace it (choose another --out)")
    prefix = f".{path.name}.new-"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        sweep_stale(path.parent, prefix)
        tmp = path.parent / f"{prefix}{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
    except OSError as err:
        raise JudgekitError(f"cannot write a judge at {path}: {err.strerror or err}") from None
    try:
        yield tmp
        for f in tmp.iterdir():
            if f.is_file():
                with open(f, "rb") as fh:
                    os.fsync(fh.fileno())
        if path.is_dir() and not any(path.iterdir()):
            path.rmdir()
        if not path.exists():
            os.rename(tmp, path)
        elif _exchange(tmp, path):
            shutil.rmtree(tmp, ignore_errors=True)  # now the old judge
        else:  # no atomic exchange here: two renames, the old judge kept aside until the new one is in place
            old = path.parent / f"{prefix}{os.getpid()}-old-{uuid.uuid4().hex[:8]}"
            os.rename(path, old)
            os.rename(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        with contextlib.suppress(OSError):
            fd = os.open(path.parent, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise JudgekitError(f"cannot write a judge at {path}: {err.strerror or err}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _fmt(v: Any) -> str:
    return f"{v:.4f}" if isinstance(v, float) else str(v)


def judge_card(config: Mapping[str, Any]) -> str:
    """The judge card (README.md): what a judge is for, how it was trained and how well it did."""
    c = config
    lines = ["---", "library_name: judgekit", "tags: [judgekit, speculative-decoding, autojudge]", "---", "",
             "# judgekit judge", "",
             "A judge head for lossy speculative decoding: given the target's hidden state at a mismatch, it "
             "predicts P(important), the chance that keeping the draft's token changes the answer. "
             "Use it with `judgekit generate --rule judge --judge <this repo or directory>`.", "",
             "## Pair", "",
             f"- target: `{c.get('target_model', '?')}`"
             + (f" (config sha256 `{c['target_config_sha256'][:16]}…`)" if c.get("target_config_sha256") else ""),
             f"- draft: `{c.get('draft_model', '?')}`",
             f"- features: `{c.get('features', 'target')}` from hidden_states[{c.get('layer', -1)}], hidden size "
             f"{c.get('hidden_size', '?')}" + (f" + draft {c['draft_hidden_size']}" if c.get("draft_hidden_size") else ""),
             f"- head: {c.get('head', 'linear')}" + (f" (hidden {c['mlp_hidden']})" if c.get("mlp_hidden") else ""),
             f"- weights sha256: `{c.get('weights_sha256', '?')}`", ""]
    data, mix = c.get("data"), c.get("mix")
    if data or mix:
        lines += ["## Data and mix", ""]
        if mix:
            lines.append(f"- mix {mix.get('requested')} at a budget of {mix.get('budget')} {mix.get('unit')}: "
                         + ", ".join(f"{k} {v:.1%}" for k, v in (mix.get("realised") or {}).items()))
        if data:
            lines.append(f"- training {data.get('train_rows')} mismatches ({data.get('train_important')} important), "
                         f"validation {data.get('val_rows')} ({data.get('val_important')} important), split by problem")
            for src in data.get("sources") or []:
                lines.append(f"  - {src.get('source')}: {', '.join(src.get('dirs') or [])}")
        lines.append("")
    metrics = c.get("metrics")
    if metrics:
        lines += ["## Validation metrics", "", "| metric | value |", "| --- | --- |"]
        lines += [f"| {k} | {_fmt(metrics[k])} |" for k in ("auroc", "average_precision", "n", "important")
                  if k in metrics]
        lines.append("")
    if c.get("thresholds"):
        lines += ["## Thresholds on P(important)", "", "| name | threshold |", "| --- | --- |"]
        lines += [f"| {k} | {v:.4f} |" for k, v in c["thresholds"].items()]
        lines.append("")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ identity

_VOLATILE_CONFIG_KEYS = {"transformers_version", "dtype", "torch_dtype", "use_cache", "architectures",
                         "output_hidden_states", "output_attentions", "return_dict"}


def config_fingerprint(config: Any) -> str:
    """sha256 of a model config's canonical JSON, without keys that change with where or how it was loaded
    (``_name_or_path``, private ``_*`` keys, transformers_version, dtype, use_cache ...)."""
    d = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    d = {k: v for k, v in d.items() if not k.startswith("_") and k not in _VOLATILE_CONFIG_KEYS}
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()


def _model_name(name: str) -> str:
    """A model's name without where it lives: `Org/Model`, `/models/Model` and `model/` all give `model`; a
    pocket alias (`pocket-target`) is the shipped directory it names."""
    from judgekit.pocket import ALIASES, pocket_model_path

    name = str(pocket_model_path(name)) if str(name) in ALIASES else str(name)
    return name.rstrip("/").rsplit("/", 1)[-1].lower()


def check_judge_matches(judge: TrainedJudge, target_hidden_size: int, target_name: str, *,
                        draft_hidden_size: int | None = None, num_hidden_layers: int | None = None,
                        target_config: Any = None) -> None:
    """Refuse a judge trained on another model's hidden states (or a layer the target does not have).

    Beyond the hidden sizes, the target's identity is checked where the judge recorded it: its name (as
    `judgekit mine --target` gave it, compared without its directory) and its config fingerprint.
    JUDGEKIT_ALLOW_FOREIGN_JUDGE=1 skips the identity check (the sizes must still fit)."""
    if judge.hidden_size != target_hidden_size:
        trained_on = judge.config.get("target_model", "another model")
        raise JudgekitError(
            f"the judge was trained on {trained_on} (hidden size {judge.hidden_size}) but the target "
            f"{target_name!r} has hidden size {target_hidden_size}"
        )
    if judge.uses_draft and draft_hidden_size is not None and judge.draft_hidden_size != draft_hidden_size:
        raise JudgekitError(
            f"the judge reads draft features of {judge.config.get('draft_model', 'another draft')} (hidden size "
            f"{judge.draft_hidden_size}) but the draft has hidden size {draft_hidden_size}"
        )
    if num_hidden_layers is not None and not -(num_hidden_layers + 1) <= judge.layer <= num_hidden_layers:
        raise JudgekitError(f"the judge reads hidden-state layer {judge.layer} but the target has only "
                            f"{num_hidden_layers + 1} hidden states")
    if os.environ.get(FOREIGN_ENV) == "1":
        return
    override = f"set {FOREIGN_ENV}=1 to use it anyway"
    trained = judge.config.get("target_model")
    if trained and _model_name(trained) != _model_name(target_name):
        raise JudgekitError(f"the judge was trained for target {trained!r}, not {target_name!r}; {override}")
    want = judge.config.get("target_config_sha256")
    if want and target_config is not None and config_fingerprint(target_config) != want:
        raise JudgekitError(f"the judge was trained for a target whose config differs from {target_name!r}'s "
                            f"(config sha256 {want[:12]}… vs {config_fingerprint(target_config)[:12]}…); {override}")


def bind_rule(rule, pair):
    """A rule whose judge (if it has one) is checked against the pair (hidden sizes, layer, identity) and
    moved to the pair's device; any other rule is returned as is. Used by `judgekit generate` and evaluation."""
    judge = getattr(rule, "judge", None)
    if judge is None or not hasattr(judge, "config"):
        return rule
    check_judge_matches(judge, pair.target.config.hidden_size, pair.target_name,
                        draft_hidden_size=pair.draft.config.hidden_size,
                        num_hidden_layers=pair.target.config.num_hidden_layers, target_config=pair.target.config)
    return dataclasses.replace(rule, judge=judge.to(pair.device))
