"""The pocket world's shipped models (docs/design.md §6): where they live and how their aliases resolve.

Kept free of heavy imports so that the model loader can use it cheaply (the task generators in judgekit/tasks
never import this package; their shared helpers are judgekit.tasks.pocket_common); the tokenizer builder,
training loop and evaluation helpers live in the submodules.
"""

from __future__ import annotations

from pathlib import Path

from judgekit.errors import JudgekitError

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parents[1]
# The models are kept (and rebuilt) in the repository's top-level data/pocket; a wheel carries a copy of that
# directory inside the package, as judgekit/pocket/shipped (see setup.py), so installs need no checkout.
INSTALLED_DIR = PACKAGE_DIR / "shipped"
CHECKOUT_DIR = REPO_ROOT / "data" / "pocket"
# The third pair (fine-tuned for pocket-math-hard, data/pocket/README.md) lives beside the shipped one.
ALIASES = {"pocket-target": "target", "pocket-draft": "draft",
           "pocket-hard-target": "hard-target", "pocket-hard-draft": "hard-draft"}


def find_pocket_dir(installed: Path = INSTALLED_DIR, checkout: Path = CHECKOUT_DIR) -> Path:
    """Where the shipped pocket models are: the copy inside an installed package if there is one (a source
    checkout never has it), else the checkout's data/pocket (editable installs, running from the repo)."""
    if (installed / "target").is_dir():
        return installed
    return checkout


POCKET_DIR = find_pocket_dir()


def pocket_model_path(alias: str, root: Path | None = None) -> Path:
    """Directory of a pocket model: 'pocket-target' -> data/pocket/target, 'pocket-draft' -> data/pocket/draft."""
    if alias not in ALIASES:
        raise JudgekitError(f"unknown pocket model {alias!r}; known: {', '.join(ALIASES)}")
    return (root or POCKET_DIR) / ALIASES[alias]


__all__ = ["ALIASES", "POCKET_DIR", "pocket_model_path"]
