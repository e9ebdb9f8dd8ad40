"""The mined-mismatch store: round trips, crash safety, resume, foreign/corrupt shards, stats and the CLI."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from judgekit import store
from judgekit.cli import main
from judgekit.errors import JudgekitError
from judgekit.store import (
    RunSettings,
    ShardWriter,
    dir_stats,
    format_stats,
    mismatch_schema,
    problem_schema,
    read_mismatches,
    read_problems,
    validate_dir,
)

H, DH = 8, 4


def settings(**kw) -> RunSettings:
    base = dict(task="gsm8k", target="tgt", draft="drf", split="test", data_file=None, max_new_tokens=64,
                layers=(-1, 2), draft_features=True, hidden_size=H, draft_hidden_size=DH, limit=10)
    base.update(kw)
    return RunSettings(**base)


def mrow(pid: str, position: int, important: bool, seed: int = 0, rollout: int = 2) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "task": "gsm8k", "problem_id": pid, "position": position, "prompt_len": 3,
        "context_ids": list(range(3 + position)), "draft_token": 7, "target_token": 9, "important": important,
        "target_outcome": json.dumps("42"), "alt_outcome": json.dumps("41" if important else "42"),
        "target_correct": True, "rollout": rollout,
        "hidden_l-1": rng.standard_normal(H).astype(np.float16),
        "hidden_l2": rng.standard_normal(H).astype(np.float32),
        "draft_hidden": rng.standard_normal(DH).astype(np.float16),
    }


def prow(pid: str, n_mismatches: int, n_important: int, correct: bool = True, n_rollouts: int | None = None,
         wall: float = 1.5) -> dict:
    return {
        "task": "gsm8k", "problem_id": pid, "response": f"answer to {pid}", "response_ids": [5, 6, 7],
        "n_rollouts": n_mismatches + 1 if n_rollouts is None else n_rollouts, "n_mismatches": n_mismatches,
        "n_important": n_important, "target_outcome": json.dumps("42"), "target_correct": correct,
        "wall_time": wall,
    }


def shards(d: Path, kind: str) -> list[Path]:
    return sorted(d.glob(f"{kind}-*.parquet"))


@pytest.fixture
def mined(tmp_path: Path) -> Path:
    """Two ranks, three commits: p0 (2 mismatches, 1 important), p1 (none), p2+p3 in one commit."""
    d = tmp_path / "run"
    w0 = ShardWriter(d, settings(), rank=0, world_size=2)
    w1 = ShardWriter(d, settings(), rank=1, world_size=2)
    w0.write([mrow("p0", 1, True, 1), mrow("p0", 4, False, 2)], [prow("p0", 2, 1, wall=2.0)])
    w1.write([], [prow("p1", 0, 0, correct=False, wall=1.0)])
    w0.write([mrow("p2", 0, False, 3), mrow("p3", 2, True, 4), mrow("p3", 5, True, 5)],
             [prow("p2", 1, 0, wall=0.5), prow("p3", 2, 2, n_rollouts=5, wall=0.5)])
    return d


# ------------------------------------------------------------------------------------------ round trip


def test_round_trip_features_bit_exact_and_lists_intact(tmp_path: Path) -> None:
    rows = [mrow("a", 1, True, 11), mrow("a", 6, False, 12)]
    w = ShardWriter(tmp_path, settings())
    w.write(rows, [prow("a", 2, 1)])
    t = read_mismatches(tmp_path)
    assert t.schema.names == mismatch_schema(settings()).names
    assert t.schema.field("hidden_l-1").type == pa.list_(pa.float16(), H)
    for col in ("hidden_l-1", "hidden_l2", "draft_hidden"):
        got = store.features_to_numpy(t, col)
        want = np.stack([np.asarray(r[col]).astype(np.float16) for r in rows])
        assert got.dtype == np.float16
        assert np.array_equal(got.view(np.uint16), want.view(np.uint16))
    assert t.column("context_ids").to_pylist() == [r["context_ids"] for r in rows]
    assert t.column("position").to_pylist() == [1, 6]
    assert t.column("important").to_pylist() == [True, False]
    assert json.loads(t.column("alt_outcome")[0].as_py()) == "41"
    p = read_problems(tmp_path)
    assert p.schema.names == problem_schema().names
    assert p.column("response_ids").to_pylist() == [[5, 6, 7]]
    assert p.column("rank").to_pylist() == [0]  # filled in by the writer
    assert read_mismatches(tmp_path, columns=["problem_id"]).column_names == ["problem_id"]


def test_every_file_carries_version_kind_and_run_fingerprint(mined: Path) -> None:
    meta = pq.read_schema(shards(mined, "mismatches")[0]).metadata
    assert meta[b"judgekit.schema_version"] == b"1"
    assert meta[b"judgekit.kind"] == b"mismatches"
    run = json.loads(meta[b"judgekit.run"])
    assert "limit" not in run and run["target"] == "tgt" and run["layers"] == [-1, 2]
    assert pq.read_schema(shards(mined, "problems")[0]).metadata[b"judgekit.kind"] == b"problems"


def test_wrong_feature_size_is_rejected(tmp_path: Path) -> None:
    bad = mrow("a", 1, True)
    bad["hidden_l2"] = np.zeros(H + 1, dtype=np.float32)
    with pytest.raises(JudgekitError, match="hidden_l2"):
        ShardWriter(tmp_path, settings()).write([bad], [prow("a", 1, 1)])


def test_empty_dir_reads_as_empty_tables(tmp_path: Path) -> None:
    ShardWriter(tmp_path, settings())
    assert read_mismatches(tmp_path).num_rows == 0
    assert read_mismatches(tmp_path).schema.names == mismatch_schema(settings()).names
    assert dir_stats(tmp_path)["important_rate"] is None


# ------------------------------------------------------------------------------- crash safety / resume


def test_leftover_tmp_and_orphan_shard_are_ignored_then_cleaned(tmp_path: Path) -> None:
    w = ShardWriter(tmp_path, settings())
    w.write([mrow("a", 1, True)], [prow("a", 1, 1)])
    # Simulate a crash in the next commit: mismatch shard renamed into place, problems shard still a temp file.
    orphan = tmp_path / "mismatches-r000-000002.parquet"
    shutil.copy(shards(tmp_path, "mismatches")[0], orphan)
    tmp = tmp_path / "problems-r000-000002.parquet.r000.deadbeef.tmp"
    tmp.write_bytes(b"half written")
    other_rank_tmp = tmp_path / "problems-r001-000001.parquet.r001.cafe.tmp"
    other_rank_tmp.write_bytes(b"rank 1 may still be writing this")

    assert read_mismatches(tmp_path).num_rows == 1  # the orphan's row is not counted
    assert validate_dir(tmp_path) == settings()
    assert ShardWriter(tmp_path, settings()).done_problem_ids() == {"a"}

    w2 = ShardWriter(tmp_path, settings())
    assert not orphan.exists() and not tmp.exists()
    assert other_rank_tmp.exists()  # another rank's temp files are not ours to delete
    w2.write([mrow("b", 0, False)], [prow("b", 1, 0)])
    assert (tmp_path / "problems-r000-000002.parquet").exists()  # the freed seq is reused
    assert read_mismatches(tmp_path).column("problem_id").to_pylist() == ["a", "b"]


def test_resume_sees_done_ids_of_all_ranks(mined: Path) -> None:
    w = ShardWriter(mined, settings(), rank=0, world_size=1)  # resumed with a different world size
    assert w.done_problem_ids() == {"p0", "p1", "p2", "p3"}
    w.write([], [prow("p4", 0, 0)])
    assert (mined / "problems-r000-000003.parquet").exists()
    validate_dir(mined)


# ------------------------------------------------------------------------------------------- manifest


def test_manifest_conflict_names_the_field(tmp_path: Path) -> None:
    ShardWriter(tmp_path, settings(target="a"))
    with pytest.raises(JudgekitError, match=r"was mined with target 'a', not 'b' \(use another --out\)"):
        ShardWriter(tmp_path, settings(target="b"))
    with pytest.raises(JudgekitError, match=r"layers \[-1, 2\], not \[-1\]"):
        ShardWriter(tmp_path, settings(target="a", layers=(-1,)))


def test_limit_change_is_allowed_and_recorded(tmp_path: Path) -> None:
    ShardWriter(tmp_path, settings(limit=10)).write([], [prow("a", 0, 0)])
    w = ShardWriter(tmp_path, settings(limit=50))
    assert w.done_problem_ids() == {"a"}
    assert json.loads((tmp_path / "manifest.json").read_text())["settings"]["limit"] == 50
    assert validate_dir(tmp_path).limit == 50


def test_manifest_schema_version_must_match(tmp_path: Path) -> None:
    ShardWriter(tmp_path, settings())
    doc = json.loads((tmp_path / "manifest.json").read_text())
    doc["schema_version"] = 99
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(JudgekitError, match="schema version 99"):
        ShardWriter(tmp_path, settings())
    with pytest.raises(JudgekitError, match="manifest.json"):
        validate_dir(tmp_path)


def test_missing_or_invalid_manifest_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(JudgekitError, match="manifest.json: missing manifest"):
        validate_dir(tmp_path)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(JudgekitError, match="manifest.json: invalid manifest"):
        validate_dir(tmp_path)


def test_settings_round_trip_through_dict() -> None:
    s = settings()
    assert RunSettings.from_dict(json.loads(json.dumps(s.to_dict()))) == s
    with pytest.raises(JudgekitError, match="missing hidden_size"):
        RunSettings.from_dict({k: v for k, v in s.to_dict().items() if k != "hidden_size"})


# ------------------------------------------------------------------------------------ validation errors


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_corrupt_shard_names_the_file(mined: Path, damage: str) -> None:
    victim = shards(mined, "mismatches")[1]
    if damage == "truncate":
        victim.write_bytes(victim.read_bytes()[:-40])
    else:
        victim.write_bytes(b"this is not parquet at all" * 10)
    with pytest.raises(JudgekitError, match=victim.name + ": not a valid Parquet file"):
        validate_dir(mined)
    with pytest.raises(JudgekitError, match=victim.name):
        read_mismatches(mined)


def test_foreign_run_shard_names_the_file_and_field(mined: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    ShardWriter(other, settings(draft="other-draft")).write([mrow("z", 1, True)], [prow("z", 1, 1)])
    intruder = mined / "problems-r001-000002.parquet"
    shutil.copy(shards(other, "problems")[0], intruder)
    shutil.copy(shards(other, "mismatches")[0], mined / "mismatches-r001-000002.parquet")
    with pytest.raises(JudgekitError, match=intruder.name + r".*draft 'other-draft', not 'drf'.*foreign"):
        validate_dir(mined)


def test_foreign_schema_version_names_the_file(mined: Path) -> None:
    victim = shards(mined, "problems")[0]
    table = pq.read_table(victim)
    meta = dict(table.schema.metadata)
    meta[b"judgekit.schema_version"] = b"2"
    pq.write_table(table.replace_schema_metadata(meta), victim)
    with pytest.raises(JudgekitError, match=victim.name + r": schema version 2, expected 1"):
        validate_dir(mined)


def test_wrong_columns_name_the_file(mined: Path) -> None:
    victim = shards(mined, "problems")[0]
    table = pq.read_table(victim)
    pq.write_table(table.drop_columns(["wall_time"]), victim)  # drop keeps the judgekit metadata
    with pytest.raises(JudgekitError, match=victim.name + ": wrong columns"):
        validate_dir(mined)


def test_duplicate_problem_rows_are_detected(mined: Path) -> None:
    # A second commit of p1 (e.g. two jobs mining the same shard) under rank 1.
    ShardWriter(mined, settings(), rank=1, world_size=2).write([], [prow("p1", 0, 0)])
    with pytest.raises(JudgekitError, match=r"duplicate problem_id 'p1'.*problems-r001-000001.*problems-r001-000002"):
        validate_dir(mined)


def test_mismatch_rows_without_problem_row_are_detected(mined: Path) -> None:
    victim = shards(mined, "mismatches")[0]
    table = pq.read_table(victim)
    ids = pa.array(["ghost"] * table.num_rows)
    pq.write_table(table.set_column(1, table.schema.field("problem_id"), ids), victim)
    with pytest.raises(JudgekitError, match=victim.name + r".*no problem row: 'ghost'"):
        validate_dir(mined)


def test_missing_mismatch_shard_of_a_commit_is_detected(mined: Path) -> None:
    victim = shards(mined, "mismatches")[0]
    victim.unlink()
    with pytest.raises(JudgekitError, match=victim.name + ": missing"):
        validate_dir(mined)


# ----------------------------------------------------------------------------------------------- stats


def test_dir_stats_numbers(mined: Path) -> None:
    s = dir_stats(mined)
    assert s["problems"] == 4 and s["mismatches"] == 5 and s["important"] == 3
    assert s["important_rate"] == pytest.approx(3 / 5)
    assert s["by_task"] == {"gsm8k": {"problems": 4, "mismatches": 5, "important": 3,
                                      "important_rate": pytest.approx(0.6)}}
    assert s["rollouts_per_problem"] == {"mean": pytest.approx((3 + 1 + 2 + 5) / 4), "min": 1, "max": 5}
    assert s["mismatches_per_problem"] == {"mean": pytest.approx(5 / 4), "min": 0, "max": 2}
    assert s["target_accuracy"] == pytest.approx(3 / 4)
    assert s["features"]["layers"] == [-1, 2]
    assert s["features"]["columns"] == {"hidden_l-1": H, "hidden_l2": H, "draft_hidden": DH}
    assert s["ranks"] == 2 and s["commits"] == 3 and s["data_files"] == 6 and not s["compacted"]
    # Per-problem latencies are summed only under their own name; the run's wall time comes from the commits.
    assert s["problem_latency_s"]["sum"] == pytest.approx(4.0)
    assert s["wall_time_s"] is not None and 0 <= s["wall_time_s"] < 60
    assert set(s["per_rank"]) == {"0", "1"} and s["per_rank"]["0"]["problems"] == 3
    text = format_stats(s)
    assert "3/5 (60.0%)" in text and "75.0% (3/4)" in text and "hidden_l-1[8]" in text
    assert "summed problem time" not in text and "overlapping" in text
    json.dumps(s)  # plain JSON types only


# ------------------------------------------------------------------------------------------------- CLI


def test_cli_data_stats_prints_summary(mined: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "stats", str(mined)]) == 0
    out = capsys.readouterr().out
    assert "problems     4" in out and "3/5 (60.0%)" in out
    assert main(["data", "stats", str(mined), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["important"] == 3


def test_cli_data_stats_corrupt_dir_is_one_line_error(mined: Path, capsys: pytest.CaptureFixture[str]) -> None:
    victim = shards(mined, "problems")[0]
    victim.write_bytes(b"garbage")
    assert main(["data", "stats", str(mined)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("judgekit: error: ") and victim.name in err


def test_run_settings_are_a_value_object() -> None:
    s = settings(layers=[-1, 2])  # lists are normalised so equality and hashing work
    assert s == settings() and hash(s) == hash(settings())
    assert dataclasses.replace(s, limit=None).fingerprint() == s.fingerprint()
