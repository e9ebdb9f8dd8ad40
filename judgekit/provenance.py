"""Where an artefact came from: judgekit's version and commit, the library versions, the models (revision,
resolved hub commit, config hash) and the data files' hashes, as one JSON-ready dict.

Every writer (eval.json, the mining manifest, judge_config.json, summary.md) calls :func:`provenance` once.
What a model was loaded with is known only to the process that loaded it, so :mod:`judgekit.models` notes each
load (:func:`judgekit.models.loaded_model_info`); a model named but not loaded here (a judge trained from mined
data) is recorded by name, its commit left to the mined manifest the data hashes point at.
"""

from __future__ import annotations

import functools
import hashlib
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable

from judgekit._version import __version__

LIBRARIES = ("torch", "transformers", "accelerate", "tokenizers", "safetensors", "numpy", "pyarrow", "datasets",
             "scikit-learn", "lightning")
PACKAGE_DIR = Path(__file__).resolve().parent


def library_versions(names: Iterable[str] = LIBRARIES) -> dict[str, str | None]:
    """Installed distribution versions (None: not installed), read from metadata without importing them."""
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


@functools.lru_cache(maxsize=None)
def git_commit(package_dir: Path = PACKAGE_DIR) -> str | None:
    """`git describe --always --dirty --tags` of the checkout judgekit runs from; None for an installed copy."""
    root = package_dir.parent
    if not (root / ".git").exists():  # a directory in a clone, a file in a worktree
        return None
    try:
        done = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty", "--tags"],
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


def file_sha256(path: str | Path) -> str | None:
    """SHA-256 of a file's bytes (None when it does not exist, e.g. a hub dataset named instead of a file)."""
    p = Path(path)
    if not p.is_file():
        return None
    digest = hashlib.sha256()
    with p.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def model_info(name: str) -> dict[str, Any]:
    """Revision asked for, hub commit it resolved to and the config's hash, for a model loaded in this process."""
    from judgekit.models import loaded_model_info  # imports torch: only when a model is named

    return loaded_model_info(name) or {"revision": None, "commit": None, "config_sha256": None, "loaded": False}


def provenance(models: Iterable[str] = (), data_files: Iterable[str | Path | None] = ()) -> dict[str, Any]:
    """The provenance block of an artefact: ``models`` by the names the run used, ``data_files`` (None entries
    are skipped) by path -> SHA-256."""
    return {
        "judgekit": {"version": __version__, "commit": git_commit()},
        "python": platform.python_version(),
        "libraries": library_versions(),
        "models": {name: model_info(name) for name in dict.fromkeys(models) if name},
        "data": {str(p): file_sha256(p) for p in data_files if p},
    }


def provenance_line(block: dict[str, Any]) -> str:
    """One human line for the foot of summary.md."""
    jk = block["judgekit"]
    libs = block["libraries"]
    models = ", ".join(f"{n}@{(m.get('commit') or m.get('revision') or 'local')[:12]}"
                       for n, m in block["models"].items())
    return (f"judgekit {jk['version']}" + (f" ({jk['commit']})" if jk["commit"] else "")
            + f"; torch {libs.get('torch')}, transformers {libs.get('transformers')}"
            + (f"; models {models}" if models else ""))


def summary_footer(eval_dir: str | Path) -> str:
    """The provenance line appended to an evaluation's summary.md, read from its eval.json ("" if absent)."""
    import json

    try:
        block = json.loads((Path(eval_dir) / "eval.json").read_text()).get("provenance")
    except (OSError, ValueError):
        return ""
    return f"\n_Provenance: {provenance_line(block)}._\n" if block else ""
