"""Writer checks: record_type and record errors, modes, locking, abort and orphan cleanup."""

from __future__ import annotations

import json
import os

import pytest

from kpl_dataset import BasicType, KPLDatasetError, ReadOnlyDataset, WriteOnlyDataset

RT = {"name": BasicType.String, "objs": [{"x": BasicType.Int, "score": BasicType.Float}]}


def rec(i: int) -> dict:
    return {"name": f"r{i}", "objs": [{"x": i, "score": 0.5}]}


@pytest.mark.parametrize(
    "record_type,message",
    [
        ({}, r"record_type <root>: a dict must have at least one key"),
        ({"a": "Str"}, r"record_type a: 'Str' is not a BasicType"),
        ({"a": {"b": [BasicType.Int, BasicType.Int]}}, r"record_type a\.b: a list must hold exactly one"),
        ({"a": [{"b": {}}]}, r"record_type a\[\]\.b: a dict must have at least one key"),
        ({1: BasicType.Int}, r"key 1 must be a string"),
        ([BasicType.Int], r"record_type <root>"),
    ],
)
def test_bad_record_type_names_key_path(tmp_path, record_type, message):
    # The original refused these with assert (or Exception): AssertionError still catches them.
    with pytest.raises(KPLDatasetError, match=message) as info:
        WriteOnlyDataset(tmp_path, None, record_type)
    assert isinstance(info.value, (AssertionError, ValueError))


@pytest.mark.parametrize(
    "value,message,builtin",
    [
        ({"name": "a", "objs": [], "extra": 1}, r"record 0: unexpected key\(s\) 'extra'", KeyError),
        ({"name": 5, "objs": []}, r"record 0, field name: expected String, got int 5", AttributeError),
        ({"name": "a", "objs": {}}, r"record 0, field objs: expected a list, got dict", TypeError),
        (
            {"name": "a", "objs": [{"x": 1, "score": 1.0}, {"x": "abc", "score": 1.0}]},
            r"record 0, field objs\[1\]\.x: expected Int, got str 'abc'",
            TypeError,
        ),
        (
            {"name": "a", "objs": [{"x": 2**64, "score": 1.0}]},
            r"objs\[0\]\.x: expected Int, got 1844.* 64 bits",
            ValueError,
        ),
        (
            {"name": "a", "objs": [{"x": 1.5, "score": 1.0}]},
            r"objs\[0\]\.x: expected Int, got float 1\.5",
            TypeError,
        ),
        (
            {"name": "a", "objs": [{"x": 1, "score": "1"}]},
            r"objs\[0\]\.score: expected Float, got str",
            TypeError,
        ),
        ({"name": "a", "objs": [{"x": 1, "y": 2}]}, r"objs\[0\]: unexpected key\(s\) 'y'", KeyError),
        ("not a dict", r"record 0: expected a dict, got str", AttributeError),
    ],
)
def test_bad_record_names_index_and_field(tmp_path, value, message, builtin):
    # The built-in class is the one kpl-dataset 0.0.9 raised for the same mistake.
    with WriteOnlyDataset(tmp_path, None, RT) as w, pytest.raises(KPLDatasetError, match=message) as info:
        w.write(value)
    assert isinstance(info.value, builtin)


def test_missing_fields_are_written_with_their_type_default(tmp_path):
    rt = {
        "s": BasicType.String,
        "i": BasicType.Int,
        "f": BasicType.Float,
        "b": BasicType.ByteArray,
        "flag": BasicType.Bool,
        "file": BasicType.File,
        "objs": [{"x": BasicType.Int}],
        "box": {"w": BasicType.Int, "tags": [BasicType.String], "inner": {"v": BasicType.Float}},
    }
    with WriteOnlyDataset(tmp_path, None, rt) as w:
        w.write({"i": 7})
        w.write({"objs": [{}], "box": {"w": 3}})
    reader = ReadOnlyDataset(tmp_path, None)
    file_default = {"type": 0, "content": b"", "file_path": "", "size": 0}
    box_default = {"w": 0, "tags": [], "inner": {"v": 0.0}}
    common = {"s": "", "f": 0.0, "b": b"", "flag": False, "file": file_default}
    assert reader[0] == {**common, "i": 7, "objs": [], "box": box_default}
    assert reader[1] == {**common, "i": 0, "objs": [{"x": 0}], "box": {**box_default, "w": 3}}


def test_write_after_close_and_missing_file_keep_the_original_types(tmp_path):
    w = WriteOnlyDataset(tmp_path, None, {"file": BasicType.File})
    with pytest.raises(FileNotFoundError, match="record 0, field file: cannot read file"):
        w.write({"file": str(tmp_path / "nope.bin")})
    w.close()
    with pytest.raises(ValueError, match="closed"):
        w.write({"file": str(tmp_path / "nope.bin")})


def test_bad_record_is_skipped_and_index_counts_writes(tmp_path):
    with WriteOnlyDataset(tmp_path, None, RT) as w:
        for i in range(12):
            w.write(rec(i))
        with pytest.raises(KPLDatasetError, match=r"^record 12, field objs\[0\]\.x"):
            w.write({"name": "bad", "objs": [{"x": None, "score": 0.0}]})
        w.write(rec(12))
    assert [r["name"] for r in ReadOnlyDataset(tmp_path, None)] == [f"r{i}" for i in range(13)]


def test_bytes_and_bool_are_strict(tmp_path):
    rt = {"raw": BasicType.ByteArray, "flag": BasicType.Bool}
    with WriteOnlyDataset(tmp_path, None, rt) as w:
        with pytest.raises(KPLDatasetError, match="field raw: expected ByteArray"):
            w.write({"raw": "text", "flag": True})
        with pytest.raises(KPLDatasetError, match="field flag: expected Bool, got int 1"):
            w.write({"raw": b"", "flag": 1})


@pytest.mark.parametrize("name", ["", "a/b", ".hidden", "x\\y", 3])
def test_bad_part_names(tmp_path, name):
    with pytest.raises(KPLDatasetError, match="data_name"):
        WriteOnlyDataset(tmp_path, name, RT)


def test_mode_w_replaces_and_removes_old_shards(tmp_path):
    with WriteOnlyDataset(tmp_path, None, RT, batch_rows=2) as w:
        for i in range(5):
            w.write(rec(i))
    old = set(os.listdir(tmp_path / "root.kpl"))
    with WriteOnlyDataset(tmp_path, None, RT) as w:
        w.write(rec(100))
    assert [r["name"] for r in ReadOnlyDataset(tmp_path, None)] == ["r100"]
    assert not old & set(os.listdir(tmp_path / "root.kpl"))


def test_mode_a_appends_and_keeps_created_time(tmp_path):
    with WriteOnlyDataset(tmp_path, "p", RT) as w:
        w.write(rec(0))
    created = json.loads((tmp_path / "p.manifest.json").read_text())["created"]
    with WriteOnlyDataset(tmp_path, "p", None, mode="a") as w:
        w.write(rec(1))
    with WriteOnlyDataset(tmp_path, "p", RT, mode="a") as w:
        w.write(rec(2))
    reader = ReadOnlyDataset(tmp_path, "p")
    assert [r["name"] for r in reader] == ["r0", "r1", "r2"]
    assert reader.manifest.created == created and len(reader.manifest.shards) == 3


def test_mode_a_refuses_a_different_record_type(tmp_path):
    WriteOnlyDataset(tmp_path, None, RT).close()
    with pytest.raises(KPLDatasetError, match="record_type differs"):
        WriteOnlyDataset(tmp_path, None, {"name": BasicType.String}, mode="a")
    with pytest.raises(KPLDatasetError, match="mode must be"):
        WriteOnlyDataset(tmp_path, None, RT, mode="x")
    with pytest.raises(KPLDatasetError, match="record_type is required"):
        WriteOnlyDataset(tmp_path, "new", None, mode="a")


def test_second_writer_of_a_part_is_refused(tmp_path):
    first = WriteOnlyDataset(tmp_path, None, RT)
    with pytest.raises(KPLDatasetError, match="being written by another writer"):
        WriteOnlyDataset(tmp_path, None, RT)
    WriteOnlyDataset(tmp_path, "other", RT).close()
    first.close()
    WriteOnlyDataset(tmp_path, None, RT, mode="a").close()


def test_exception_in_with_block_aborts(tmp_path):
    with WriteOnlyDataset(tmp_path, None, RT) as w:
        w.write(rec(0))
    with pytest.raises(RuntimeError), WriteOnlyDataset(tmp_path, None, RT, batch_rows=1) as w:
        w.write(rec(1))
        w.write(rec(2))
        raise RuntimeError("boom")
    assert [r["name"] for r in ReadOnlyDataset(tmp_path, None)] == ["r0"]
    manifest = json.loads((tmp_path / "root.manifest.json").read_text())
    assert sorted(os.listdir(tmp_path / "root.kpl")) == sorted(
        s["path"].split("/")[1] for s in manifest["shards"]
    )


def test_unclosed_writer_leaves_previous_state_and_is_cleaned(tmp_path):
    with WriteOnlyDataset(tmp_path, None, RT) as w:
        w.write(rec(0))
    w = WriteOnlyDataset(tmp_path, None, RT, batch_rows=1, shard_rows=1)
    for i in range(5):
        w.write(rec(i + 1))
    assert [r["name"] for r in ReadOnlyDataset(tmp_path, None)] == ["r0"]
    del w  # never closed: its handles are released, nothing is committed
    assert len(os.listdir(tmp_path / "root.kpl")) > 1
    with WriteOnlyDataset(tmp_path, None, RT, mode="a") as w:
        w.write(rec(9))
    assert [r["name"] for r in ReadOnlyDataset(tmp_path, None)] == ["r0", "r9"]
    assert len(os.listdir(tmp_path / "root.kpl")) == 2


def test_write_after_close_fails(tmp_path):
    w = WriteOnlyDataset(tmp_path, None, RT)
    w.close()
    w.close()
    with pytest.raises(KPLDatasetError, match="closed"):
        w.write(rec(0))
