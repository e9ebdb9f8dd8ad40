"""The pocket world's shipped models (DESIGN.md §6): where they live and how their aliases resolve.

Kept free of heavy imports so that the model loader can use it cheaply (the task generators in judgekit/tasks
never import this package; their shared helpers are judgekit.tasks.pocket_common); the tokenizer builder,
training loop and evaluation helpers live in the submodules.
"""

from __future__ import annotations

from pathlib import Path

from judgekit.errors import JudgekitError

REPO_ROOT = Path(__file__).resolve().parents[2]
POCKET_DIR = REPO_ROOT / "data" / "pocket"
ALIASES = {"pocket-target": "target", "pocket-draft": "draft"}


def pocket_model_path(alias: str, root: Path | None = None) -> Path:
    """Directory of a pocket model: 'pocket-target' -> data/pocket/target, 'pocket-draft' -> data/pocket/draft."""
    if alias not in ALIASES:
        raise JudgekitError(f"unknown pocket model {alias!r}; known: {', '.join(ALIASES)}")
    return (root or POCKET_DIR) / ALIASES[alias]


__all__ = ["ALIASES", "POCKET_DIR", "pocket_model_path"]
