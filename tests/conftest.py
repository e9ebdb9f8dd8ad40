"""Shared test settings and fixtures.

One torch thread keeps parallel CI jobs on a 2-core machine predictable. The tiny random-init model pair
(built from a config, saved with real tokenizer files, loaded through the public path) is built once per
session per architecture and shared by every module that decodes, mines or runs the CLI on it.
"""

import os

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

try:
    import torch

    torch.set_num_threads(1)
except ImportError:  # pragma: no cover
    pass

TINY_ARCHS = ("llama", "qwen2")


class TinyModels:
    """Builds each architecture's tiny target/draft pair on first use and keeps it for the session.

    The draft is a noisy copy of the target (``save_tiny_pair``'s default), so drafts are partly accepted
    and every rollback path runs. Tests must not modify the loaded models: they are shared.
    """

    def __init__(self, tmp_path_factory):
        self._factory = tmp_path_factory
        self._dirs: dict = {}
        self._pairs: dict = {}

    def dirs(self, arch: str = "llama"):
        """(target directory, draft directory)."""
        if arch not in self._dirs:
            from judgekit.benchmarks.synthetic import save_tiny_pair

            self._dirs[arch] = save_tiny_pair(self._factory.mktemp(f"tiny-{arch}"), arch=arch, seed=3)
        return self._dirs[arch]

    def pair(self, arch: str = "llama"):
        """The pair loaded on the CPU in fp32 (a ``judgekit.models.ModelPair``)."""
        if arch not in self._pairs:
            from judgekit.models import load_model_pair

            target, draft = self.dirs(arch)
            self._pairs[arch] = load_model_pair(str(target), str(draft), device="cpu", dtype="fp32")
        return self._pairs[arch]


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> TinyModels:
    return TinyModels(tmp_path_factory)


@pytest.fixture(scope="session")
def tiny_dirs(tiny_models):
    """(target, draft) directories of the tiny llama pair, for tests that pass paths (CLI, subprocesses)."""
    return tiny_models.dirs("llama")


@pytest.fixture(scope="session", params=TINY_ARCHS)
def tiny_pair(request, tiny_models):
    """The tiny pair, loaded, once for each architecture (tests using it run for both)."""
    return tiny_models.pair(request.param)
