"""The shipped pocket pair through the real decoder and the miner: the numbers the data card promises."""

from __future__ import annotations

import pytest

from judgekit.cli import main
from judgekit.evaluate.run import run_eval
from judgekit.evaluate.summary import summarize
from judgekit.evaluate.sweep import EvalSettings, Sweep
from judgekit.mine.miner import MineConfig, Miner, lookup_draft
from judgekit.models import load_model_pair
from judgekit.pocket import POCKET_DIR
from judgekit.store.records import read_records
from judgekit.tasks import get_task

pytestmark = pytest.mark.skipif(not (POCKET_DIR / "target" / "model.safetensors").exists(),
                                reason="pocket models not trained")


@pytest.fixture(scope="module")
def pair():
    return load_model_pair("pocket-target", "pocket-draft", device="cpu", dtype="fp32")


def test_lossless_block_efficiency_on_pocket_math(pair, tmp_path):
    task = get_task("pocket-math")
    settings = EvalSettings("pocket-math", "pocket-target", "pocket-draft", limit=12, max_new_tokens=256)
    run_eval(pair, task, task.load("test", limit=12), Sweep(["lossless"]).points(), settings, str(tmp_path))
    (row,) = summarize(read_records(tmp_path))
    assert row["n"] == 12 and row["block_size"] == 8
    assert row["block_efficiency"] >= 2.5
    assert row["quality"] >= 0.75


@pytest.mark.slow
def test_mining_the_pocket_pair_finds_both_labels(pair, tmp_path, capsys):
    task = get_task("pocket-math")
    results = list(Miner(pair, task, MineConfig(max_new_tokens=200), batch_size=4).mine_many(task.load("train", limit=16)))
    labels = [r.important for res in results for r in res.records]
    assert True in labels and False in labels
    out = tmp_path / "mined"
    assert main(["mine", "--task", "pocket-math", "--target", "pocket-target", "--draft", "pocket-draft",
                 "--out", str(out), "--limit", "16", "--device", "cpu", "--quiet", "--max-new-tokens", "200"]) == 0
    assert main(["data", "stats", str(out)]) == 0
    text = capsys.readouterr().out
    assert "important" in text and "rollouts" in text
    n_imp = sum(labels)
    assert f"{n_imp}/{len(labels)}" in text  # the CLI run found exactly the in-process labels


def test_lookup_draft():
    assert lookup_draft([1, 2, 3, 9, 1, 2], [7, 1, 2, 5, 6, 7], 3) == [5, 6, 7]  # reference first
    assert lookup_draft([1, 2, 3, 9, 1, 2], [], 2) == [3, 9]  # else the sequence itself
    assert lookup_draft([4, 5], [1, 2, 3], 3) == []
    assert lookup_draft([1, 2], [1, 2, 3], 0) == []
