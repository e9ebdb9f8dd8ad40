"""The mined-mismatch store: round trips, crash safety, resume, foreign/corrupt shards, stats and the CLI."""

from __future__ import annotations

import dataclasses
import json
import shutil
import signal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from judgekit.store import mined as store
from judgekit.cli import main
from judgekit.errors import JudgekitError
from judgekit.store.compact import compact_dir
from judgekit.store.mined import (
    RunSettings,
    ShardWriter,
    mismatch_schema,
    problem_schema,
    read_mismatches,
    read_problems,
    validate_dir,
)
from judgekit.store.stats import dir_stats, format_stats

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
    w0.close()
    w1.close()
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
    w.close()  # the process dies: its locks go with it
    # Simulate a crash in the next commit: mismatch shard renamed into place, problems shard still a temp file.
    orphan = tmp_path / "mismatches-r000-000002.parquet"
    shutil.copy(shards(tmp_path, "mismatches")[0], orphan)
    tmp = tmp_path / "problems-r000-000002.parquet.r000.deadbeef.tmp"
    tmp.write_bytes(b"half written")
    other_rank_tmp = tmp_path / "problems-r001-000001.parquet.r001.cafe.tmp"
    other_rank_tmp.write_bytes(b"rank 1 may still be writing this")

    assert read_mismatches(tmp_path).num_rows == 1  # the orphan's row is not counted
    assert validate_dir(tmp_path) == settings()
    with ShardWriter(tmp_path, settings()) as peek:
        assert peek.done_problem_ids() == {"a"}

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


# ---------------------------------------------------------------------------------- silent corruption


def _flip_in_column(path: Path, column: str, n_bytes: int = 16) -> None:
    """Flip up to n_bytes at the end of `column`'s chunk in row group 0: inside its last page's data."""
    md = pq.read_metadata(path)
    names = [md.schema.column(i).path.split(".")[0] for i in range(md.num_columns)]
    chunk = md.row_group(0).column(names.index(column))
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    end = start + chunk.total_compressed_size
    k = max(1, min(n_bytes, chunk.total_compressed_size // 4))
    data = bytearray(path.read_bytes())
    for i in range(end - k, end):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))


def _check_named(d: Path, victim: Path) -> None:
    with pytest.raises(JudgekitError, match=victim.name + ": corrupt data"):
        validate_dir(d)
    with pytest.raises(JudgekitError, match=victim.name):
        read_mismatches(d) if victim.name.startswith("mismatches") else read_problems(d)


@pytest.mark.parametrize("compacted", [False, True], ids=["shards", "compacted"])
@pytest.mark.parametrize("column", mismatch_schema(settings()).names)
def test_flipped_bytes_in_any_mismatch_column_are_named(mined: Path, column: str, compacted: bool) -> None:
    if compacted:
        compact_dir(mined)
    victim = shards(mined, "mismatches")[0]
    _flip_in_column(victim, column)
    _check_named(mined, victim)


@pytest.mark.parametrize("column", problem_schema().names)
def test_flipped_bytes_in_any_problem_column_are_named(mined: Path, column: str) -> None:
    compact_dir(mined)
    victim = shards(mined, "problems")[0]
    _flip_in_column(victim, column)
    _check_named(mined, victim)


def test_issue_reproduction_64_bytes_in_features_fail_the_cli(tmp_path: Path, capsys) -> None:
    big = settings(hidden_size=512, draft_features=False, draft_hidden_size=None, layers=(-1,))
    rows = [{k: v for k, v in mrow("a", i, i % 2 == 0, seed=i).items() if k not in ("hidden_l2", "draft_hidden")}
            for i in range(40)]
    for r in rows:
        r["hidden_l-1"] = np.random.default_rng(len(r["context_ids"])).standard_normal(512).astype(np.float16)
    with ShardWriter(tmp_path, big) as w:
        w.write(rows, [prow("a", 40, 20)])
    victim = shards(tmp_path, "mismatches")[0]
    _flip_in_column(victim, "hidden_l-1", 64)
    assert main(["data", "stats", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and victim.name in err and "corrupt data" in err


# --------------------------------------------------------------------------------------------- compaction


def _snapshot(d: Path) -> tuple[list, list]:
    """Every committed row, features bit-exact, in read order."""
    mm = read_mismatches(d)
    fcols = store.feature_columns(settings())
    cols = [c for c in mm.column_names if c not in fcols]
    feats = {c: store.features_to_numpy(mm, c).view(np.uint16).tolist() for c in fcols}
    rows = [tuple(r[c] for c in cols) + tuple(tuple(feats[c][i]) for c in sorted(feats))
            for i, r in enumerate(mm.select(cols).to_pylist())]
    probs = [tuple(sorted(r.items())) for r in read_problems(d).to_pylist()]
    return rows, probs


def _many_commits(d: Path, n: int = 12) -> None:
    with ShardWriter(d, settings(), rank=0, world_size=2) as w0, ShardWriter(d, settings(), rank=1, world_size=2) as w1:
        for i in range(n):
            k = i % 3
            (w0 if i % 2 == 0 else w1).write([mrow(f"q{i}", j, j % 2 == 0, seed=100 * i + j) for j in range(k)],
                                             [prow(f"q{i}", k, (k + 1) // 2)])


def test_compaction_keeps_every_row_and_leaves_two_files(mined: Path) -> None:
    _many_commits(mined)
    before = _snapshot(mined)
    res = compact_dir(mined)
    assert res.commits == 3 + 12 and res.files_before == 30 and res.files_after == 2
    assert sorted(p.name for p in mined.glob("*.parquet")) == ["mismatches-c000001-p000.parquet",
                                                              "problems-c000001.parquet"]
    assert _snapshot(mined) == before
    validate_dir(mined)
    s = dir_stats(mined)
    assert s["compacted"] and s["data_files"] == 2 and s["problems"] == 16 and s["wall_time_s"] is not None
    assert pq.ParquetFile(mined / "mismatches-c000001-p000.parquet").num_row_groups == 1
    assert compact_dir(mined).commits == 0  # already compact: nothing to do


def test_compaction_splits_large_data_into_parts_and_row_groups(mined: Path) -> None:
    _many_commits(mined)
    before = _snapshot(mined)
    compact_dir(mined, row_group_bytes=400, file_bytes=1000)
    parts = sorted(mined.glob("mismatches-c000001-p*.parquet"))
    assert len(parts) > 1 and pq.ParquetFile(parts[0]).num_row_groups > 1
    assert _snapshot(mined) == before
    validate_dir(mined)


def test_resume_after_compaction_then_compact_again(mined: Path) -> None:
    compact_dir(mined)
    before = _snapshot(mined)
    with ShardWriter(mined, settings(), rank=0, world_size=1) as w:
        assert w.done_problem_ids() == {"p0", "p1", "p2", "p3"}
        w.write([mrow("p9", 1, True, 9)], [prow("p9", 1, 1)])
    # The new commit never reuses a name the compaction replaced (it would be read as replaced).
    assert (mined / "problems-r000-000003.parquet").exists()
    after = _snapshot(mined)
    assert after[0][: len(before[0])] == before[0] and len(after[1]) == 5
    compact_dir(mined)
    assert sorted(p.name for p in mined.glob("*.parquet")) == ["mismatches-c000002-p000.parquet",
                                                              "problems-c000002.parquet"]
    assert _snapshot(mined) == after
    validate_dir(mined)


def test_compaction_is_refused_while_a_writer_holds_the_dir(mined: Path, capsys) -> None:
    files = sorted((p.name, p.read_bytes()) for p in mined.iterdir())
    with ShardWriter(mined, settings(), rank=0, world_size=2):
        with pytest.raises(JudgekitError, match="still being written"):
            compact_dir(mined)
        assert main(["data", "compact", str(mined)]) == 2
        assert "still being written" in capsys.readouterr().err
    assert sorted((p.name, p.read_bytes()) for p in mined.iterdir()) == files
    assert main(["data", "compact", str(mined)]) == 0
    assert "into 2 data files" in capsys.readouterr().out


def test_compaction_refuses_a_corrupt_dir_and_changes_nothing(mined: Path) -> None:
    victim = shards(mined, "mismatches")[1]
    _flip_in_column(victim, "context_ids")
    files = sorted((p.name, p.read_bytes()) for p in mined.iterdir())
    with pytest.raises(JudgekitError, match=victim.name):
        compact_dir(mined)
    assert sorted((p.name, p.read_bytes()) for p in mined.iterdir()) == files


def test_lost_compaction_part_is_named(mined: Path) -> None:
    compact_dir(mined)
    part = mined / "mismatches-c000001-p000.parquet"
    part.unlink()
    with pytest.raises(JudgekitError, match=part.name + ": missing"):
        validate_dir(mined)
    with pytest.raises(JudgekitError, match=part.name):
        read_mismatches(mined)


def _compact_dying_at(d: Path, step: int) -> int:
    """Run compact_dir in a forked child that SIGKILLs itself before its `step`-th file-system change (rename
    or delete); returns how many such changes a full compaction made (when it did not die), else -1."""
    import os

    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        try:
            calls = [0]
            real_replace, real_unlink = os.replace, Path.unlink

            def gate() -> None:
                if calls[0] == step:
                    os.kill(os.getpid(), signal.SIGKILL)
                calls[0] += 1

            def replace(*a, **k):
                gate()
                return real_replace(*a, **k)

            def unlink(self, *a, **k):
                gate()
                return real_unlink(self, *a, **k)

            os.replace, Path.unlink = replace, unlink
            compact_dir(d, row_group_bytes=400, file_bytes=1000)
            os._exit(100 + min(calls[0], 100))
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    assert code == -signal.SIGKILL or code >= 100, code
    return code - 100 if code >= 100 else -1


def test_kill_at_every_step_of_compaction_loses_and_duplicates_nothing(mined: Path, tmp_path: Path) -> None:
    _many_commits(mined, 5)
    before = _snapshot(mined)
    pristine = tmp_path / "pristine"
    shutil.copytree(mined, pristine)
    total = _compact_dying_at(mined, 10**6)
    assert total > 10 and _snapshot(mined) == before
    for step in range(total):
        d = tmp_path / f"kill-{step}"
        shutil.copytree(pristine, d)
        assert _compact_dying_at(d, step) == -1
        assert _snapshot(d) == before, f"killed before change {step}"
        validate_dir(d)
        with ShardWriter(d, settings(), rank=0, world_size=2) as w:  # a resumed run sees every problem once
            assert len(w.done_problem_ids()) == 9
        compact_dir(d)  # and a later compaction finishes the job
        assert _snapshot(d) == before and len(list(d.glob("*.parquet"))) <= 4
        shutil.rmtree(d)


def test_compact_cli_errors_are_one_line_and_touch_nothing(tmp_path: Path, capsys) -> None:
    assert main(["data", "compact", str(tmp_path / "nope")]) == 2
    assert main(["data", "compact", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("judgekit: error:") == 2 and "no such directory" in err and "missing manifest" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("compacted", [False, True], ids=["shards", "compacted"])
def test_shard_level_reading_sees_every_committed_row_once(mined: Path, compacted: bool) -> None:
    """Readers that walk committed_pairs and read shard by shard (the judge trainer) see what read_mismatches sees."""
    _many_commits(mined)
    if compacted:
        compact_dir(mined, row_group_bytes=400, file_bytes=1000)
        assert len(list(mined.glob("mismatches-c*"))) > 1
    pairs, _ = store.committed_pairs(store.list_shards(mined))
    parts = [store._read_shard(m, settings(), ["problem_id", "position"]) for m, _p in pairs if m is not None]
    assert pa.concat_tables(parts).to_pylist() == read_mismatches(mined, ["problem_id", "position"]).to_pylist()
