"""judgekit.store.atomic: a failed write leaves the old file and no temporary behind; Parquet goes out checksummed."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from judgekit.store.atomic import atomic_write_bytes, atomic_write_table


def test_a_write_replaces_the_whole_file(tmp_path):
    path = tmp_path / "f.json"
    atomic_write_bytes(path, b"old")
    atomic_write_bytes(path, b"new", rank=3)
    assert path.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.json"]


@pytest.mark.parametrize("kind", ["bytes", "table"])
def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path, monkeypatch, kind):
    path = tmp_path / "f"
    path.write_bytes(b"old")

    def refuse(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="disk full"):
        if kind == "bytes":
            atomic_write_bytes(path, b"new", rank=1)
        else:
            atomic_write_table(path, pa.table({"x": [1, 2]}), rank=1)
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


def test_tables_carry_page_checksums(tmp_path):
    path = tmp_path / "t.parquet"
    atomic_write_table(path, pa.table({"x": list(range(1000)), "s": ["a", "b"] * 500}))
    assert pq.read_table(path, page_checksum_verification=True).num_rows == 1000
    data = bytearray(path.read_bytes())
    data[200] ^= 0xFF  # inside the first column chunk's data page
    path.write_bytes(bytes(data))
    with pytest.raises(OSError, match="CRC"):
        pq.read_table(path, page_checksum_verification=True)
