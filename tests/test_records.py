"""Evaluation records on disk (judgekit.store.records) and the directory core under both stores
(judgekit.store.shards): verified reads, locks, directory kinds, input hashes, old versions. No model loads here;
the end-to-end eval behaviour (resume, kill -9, refusals through the CLI) is in test_eval.py."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from judgekit.errors import JudgekitError
from judgekit.store.mined import RunSettings, ShardWriter
from judgekit.store.records import (
    RECORD_SCHEMA,
    RecordWriter,
    check_eval_dir,
    done_records,
    read_records,
)
from judgekit.store.shards import DirectoryBusy, directory_kind, file_sha256, require_kind

SETTINGS = {"task": "pocket-math", "target": "t", "draft": "d", "split": "test", "data_file": None, "limit": 4,
            "max_new_tokens": 16, "top_k": None, "top_p": None, "chat_template": True, "data_sha256": None}


def record(point: str, problem: str, i: int = 0, judge: str | None = None) -> dict:
    return {"point": point, "config": point.split("/")[0], "label": f"label {point}", "rule": "lossless",
            "params": json.dumps({"lam": 0.1 * i}), "judge_sha256": judge, "temperature": 0.5, "block_size": 4,
            "tree": "2,1" if i % 3 == 2 else None,
            "seed": 7 + i, "problem": problem, "completion_ids": list(range(i, i + 9)), "text": f"answer {i} " * 3,
            "finish_reason": "eos" if i % 2 else "length", "outcome": json.dumps(str(i)), "correct": bool(i % 2),
            "new_tokens": 9 + i, "target_calls": 3 + i, "draft_calls": 12 + i, "accept_hist": [1, 0, i, 2],
            "wall_time": 0.25 * (i + 1), "prompt": f"question {i}", "reference": json.dumps(str(i))}


@pytest.fixture
def evdir(tmp_path: Path) -> Path:
    d = tmp_path / "ev"
    with RecordWriter(d, SETTINGS) as w:
        w.write([record("a/0", f"p{i}", i) for i in range(6)])
        w.write([record("b/0", f"p{i}", i + 1) for i in range(3)])
    return d


def shards(d: Path) -> list[Path]:
    return sorted(d.glob("records-*.parquet"))


def test_round_trip_in_write_order(evdir: Path) -> None:
    got = read_records(evdir).to_pylist()
    want = [record("a/0", f"p{i}", i) for i in range(6)] + [record("b/0", f"p{i}", i + 1) for i in range(3)]
    assert got == [{**r, "rank": 0} for r in want]
    assert read_records(evdir, ["point", "problem"]).num_rows == 9
    assert set(done_records(evdir)) == {(r["point"], r["problem"]) for r in want}


# ------------------------------------------------------------------------------------ corrupted shards


def _chunk_spans(path: Path) -> dict[str, tuple[int, int]]:
    md = pq.read_metadata(path)
    spans = {}
    for i in range(md.num_columns):
        chunk = md.row_group(0).column(i)
        start = chunk.dictionary_page_offset or chunk.data_page_offset
        spans[md.schema.column(i).path.split(".")[0]] = (start, start + chunk.total_compressed_size)
    return spans


def _flip(path: Path, offset: int, mask: int = 0x5A) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= mask
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("column", RECORD_SCHEMA.names)
@pytest.mark.parametrize("where", [1, 4, 8])  # bytes before the end of the column's chunk: its last page's data
def test_a_flipped_byte_in_any_column_is_one_error_naming_the_shard(evdir: Path, column: str, where: int) -> None:
    victim = shards(evdir)[0]
    start, end = _chunk_spans(victim)[column]
    assert end - where > start
    _flip(victim, end - where)
    with pytest.raises(JudgekitError, match=victim.name):
        read_records(evdir)
    with pytest.raises(JudgekitError, match=victim.name):
        done_records(evdir)


@pytest.mark.slow
def test_no_bit_flip_anywhere_silently_changes_the_records(evdir: Path) -> None:
    """One bit of a byte every few hundred bytes across the smaller shard (pages, page headers) and of every byte
    of its footer: an error naming the file, or the very same records (a flip in statistics nothing reads).
    (Every byte of the shard was checked once by hand; the stride keeps this test to seconds in CI.)"""
    victim = shards(evdir)[1]
    original = victim.read_bytes()
    before = read_records(evdir).to_pylist()
    loud = same = 0
    stride = max(1, len(original) // 300)
    offsets = sorted(set(range(0, len(original), stride)) | set(range(max(0, len(original) - 96), len(original))))
    for offset in offsets:
        data = bytearray(original)
        data[offset] ^= 1 << (offset % 8)
        victim.write_bytes(bytes(data))
        try:
            got = read_records(evdir).to_pylist()
        except JudgekitError as err:
            assert victim.name in str(err)
            loud += 1
            continue
        assert got == before, f"bit {offset % 8} of byte {offset} changed the records silently"
        same += 1
    assert loud > 0.5 * (loud + same)


def test_a_truncated_or_foreign_shard_is_named(evdir: Path, tmp_path: Path) -> None:
    victim = shards(evdir)[0]
    victim.write_bytes(victim.read_bytes()[:-100])
    with pytest.raises(JudgekitError, match=victim.name):
        read_records(evdir)
    pq.write_table(pa.table({"point": ["a"], "problem": ["p"]}), victim)  # no judgekit metadata
    with pytest.raises(JudgekitError, match=victim.name + ": not a judgekit eval shard"):
        read_records(evdir)
    renamed = RECORD_SCHEMA.remove(0).insert(0, pa.field("pont", pa.string()))  # same kind/version metadata
    pq.write_table(pa.Table.from_pylist([{**record("a/0", "p0"), "pont": "a/0", "rank": 0}], schema=renamed), victim)
    with pytest.raises(JudgekitError, match=victim.name + ": corrupt shard"):
        read_records(evdir)


# ----------------------------------------------------------------------------------------------- writers


def test_a_second_writer_of_the_same_rank_is_refused_other_ranks_share(evdir: Path) -> None:
    with RecordWriter(evdir, SETTINGS, rank=0):
        with pytest.raises(DirectoryBusy, match="rank 0 is being written by another `judgekit eval`"):
            RecordWriter(evdir, SETTINGS, rank=0)
        with RecordWriter(evdir, SETTINGS, rank=1) as other:
            other.write([record("c/0", "p0")])
    with RecordWriter(evdir, SETTINGS, rank=0) as again:  # released on close (and by a process's death)
        again.write([record("c/0", "p1")])
    assert read_records(evdir).num_rows == 11


def test_resumed_rank_continues_its_numbering_and_cleans_only_its_temps(evdir: Path) -> None:
    mine = evdir / "records-r000-000002.parquet.r000.0123abcd.tmp"
    theirs = evdir / "records-r001-000000.parquet.r001.0123abcd.tmp"
    mine.write_bytes(b"killed mid-write")
    theirs.write_bytes(b"rank 1 may be writing this")
    with RecordWriter(evdir, SETTINGS) as w:
        assert not mine.exists() and theirs.exists()
        w.write([record("c/0", "p0")])
    assert [p.name for p in shards(evdir)][-1] == "records-r000-000002.parquet"


def test_duplicate_pairs_of_two_ranks_read_once(evdir: Path) -> None:
    with RecordWriter(evdir, SETTINGS, rank=1) as w:
        w.write([record("a/0", "p0", 5), record("z/0", "p0")])
    rows = read_records(evdir).to_pylist()
    assert len(rows) == 10
    assert next(r for r in rows if (r["point"], r["problem"]) == ("a/0", "p0"))["rank"] == 0


def test_other_settings_or_changed_data_file_are_refused_and_nothing_is_written(evdir: Path) -> None:
    before = {p.name: p.read_bytes() for p in evdir.iterdir()}
    for change in ({"max_new_tokens": 32}, {"data_sha256": "ab" * 32}):
        with pytest.raises(JudgekitError, match="holds another evaluation .*" + next(iter(change))):
            RecordWriter(evdir, {**SETTINGS, **change})
    check_eval_dir(evdir, {**SETTINGS, "limit": 9})  # a grown limit resumes
    assert {p.name: p.read_bytes() for p in evdir.iterdir()} == before


def test_version_1_directories_are_read_but_not_resumed(tmp_path: Path) -> None:
    """A directory written before the input hashes: readable (summaries, plots), refused for writing."""
    d = tmp_path / "old"
    d.mkdir()
    settings = {k: v for k, v in SETTINGS.items() if k != "data_sha256"}
    (d / "eval.json").write_text(json.dumps({"kind": "judgekit.eval", "schema_version": 1, "settings": settings}))
    later = ("judge_sha256", "prompt", "reference", "tree")  # columns of versions 2, 3 and 4
    v1 = pa.schema([f for f in RECORD_SCHEMA if f.name not in later],
                   metadata={b"judgekit.schema_version": b"1", b"judgekit.kind": b"judgekit.eval"})
    rows = [{k: v for k, v in {**record("a/0", "p0"), "rank": 0}.items() if k not in later}]
    pq.write_table(pa.Table.from_pylist(rows, schema=v1), d / "records-r000-000000.parquet",
                   write_page_checksum=True)
    got = read_records(d).to_pylist()
    assert got == [{**record("a/0", "p0"), "rank": 0, **dict.fromkeys(later)}]
    with pytest.raises(JudgekitError, match="older judgekit .*version 1.*use a new --out"):
        RecordWriter(d, SETTINGS)


# ------------------------------------------------------------------------------------------ directory kinds


def _mined_settings() -> RunSettings:
    return RunSettings(task="pocket-math", target="t", draft="d", split="train", data_file=None, max_new_tokens=8,
                       layers=(-1,), draft_features=False, hidden_size=4, draft_hidden_size=None, limit=None)


def test_each_directory_kind_is_recognised_and_other_kinds_refused(evdir: Path, tmp_path: Path) -> None:
    mined = tmp_path / "mined"
    with ShardWriter(mined, _mined_settings()):
        pass
    judge = tmp_path / "judge"
    judge.mkdir()
    (judge / "judge_config.json").write_text("{}")
    assert [directory_kind(p) for p in (mined, evdir, judge, tmp_path / "new")] == ["mined", "eval", "judge", None]
    for path, kind in ((mined, "eval"), (judge, "eval"), (evdir, "mined"), (judge, "mined"), (evdir, "judge")):
        before = sorted(p.name for p in path.iterdir())
        with pytest.raises(JudgekitError, match=f"{path} is an? .* directory .*, not an? "):
            require_kind(path, kind)
        assert sorted(p.name for p in path.iterdir()) == before
    with pytest.raises(JudgekitError, match="is a mining directory"):
        RecordWriter(mined, SETTINGS)
    with pytest.raises(JudgekitError, match="is an evaluation directory"):
        ShardWriter(evdir, _mined_settings())
    with pytest.raises(JudgekitError, match="is a judge directory"):
        ShardWriter(judge, _mined_settings())
    require_kind(tmp_path / "new", "eval")  # a new --out is fine
    with pytest.raises(JudgekitError, match="not an evaluation directory"):
        require_kind(tmp_path / "new", "eval", must_exist=True)
    (evdir / "manifest.json").write_text("{}")
    with pytest.raises(JudgekitError, match="several kinds"):
        directory_kind(evdir)


def test_file_sha256_is_the_content_hash(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"abc")
    assert file_sha256(f) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    with pytest.raises(JudgekitError, match="cannot read"):
        file_sha256(tmp_path / "missing")
