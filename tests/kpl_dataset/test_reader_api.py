"""Reader behaviour beyond round trips: pickling, reopening, index types, cursor semantics."""

from __future__ import annotations

import pickle

import pytest

from kpl_dataset import BasicType, ReadOnlyDataset, WriteOnlyDataset

RT = {"i": BasicType.Int, "s": BasicType.String}


@pytest.fixture
def reader(tmp_path):
    with WriteOnlyDataset(tmp_path, "p", RT, batch_rows=3) as w:
        for i in range(10):
            w.write({"i": i, "s": str(i)})
    with ReadOnlyDataset(tmp_path, "p") as r:
        yield r


def test_pickled_reader_reopens_its_files(reader):
    assert reader[4]["i"] == 4
    copy = pickle.loads(pickle.dumps(reader))
    assert copy.data_name == "p"
    assert [r["i"] for r in copy] == list(range(10))


def test_close_then_use_reopens(reader):
    assert reader[9]["s"] == "9"
    reader.close()
    assert reader[9]["s"] == "9"


def test_index_types(reader):
    np = pytest.importorskip("numpy")
    assert reader[np.int64(2)]["i"] == 2
    assert reader[True]["i"] == 1
    with pytest.raises((TypeError, ValueError)):
        reader["x"]


def test_cursor_is_shared_by_next_and_iteration(reader):
    assert reader.next()["i"] == 0
    assert next(reader)["i"] == 1
    assert [r["i"] for r in reader] == list(range(2, 10))
    assert list(reader) == []
    reader.reset()
    assert len(list(reader)) == 10


def test_next_continues_after_the_record_read_by_index(reader):
    assert reader[6]["i"] == 6
    assert reader.next()["i"] == 7
    assert [r["i"] for r in reader] == [8, 9]
    assert reader[2:5] == [reader[2], reader[3], reader[4]]
    assert reader.next()["i"] == 5  # a slice leaves the cursor where reader[4] put it
    assert reader[-1]["i"] == 9
    with pytest.raises(StopIteration):
        reader.next()


def test_schema_properties(reader):
    assert reader.schema == RT
    assert reader.arrow_schema.names == ["i", "s"]
    assert len(reader.manifest.shards) == 1 and len(reader.manifest.shards[0].batches) == 4


def test_records_are_fresh_objects_the_caller_may_change(tmp_path):
    rt = {
        "s": BasicType.String,
        "f": BasicType.Float,
        "b": BasicType.Bool,
        "box": {"tags": [BasicType.String]},
    }
    with WriteOnlyDataset(tmp_path, None, rt) as w:
        for i in range(4):
            w.write({"s": f"é{i}", "f": i / 2, "b": i % 2 == 0, "box": {"tags": [str(i)]}})
    reader = ReadOnlyDataset(tmp_path, None)
    first = reader[1]
    assert first == {"s": "é1", "f": 0.5, "b": False, "box": {"tags": ["1"]}}
    first["s"] = "changed"
    first["box"]["tags"].append("extra")
    assert reader[1] == {"s": "é1", "f": 0.5, "b": False, "box": {"tags": ["1"]}}
    reader.reset()
    assert [r["s"] for r in reader] == ["é0", "é1", "é2", "é3"]


def test_iteration_copies_bytes_out_of_the_map_from_any_start(tmp_path):
    blobs = [bytes([i]) * (i * 37 % 101) for i in range(25)]  # varied lengths, some empty
    rt = {"b": BasicType.ByteArray, "i": BasicType.Int}
    with WriteOnlyDataset(tmp_path, "p", rt, batch_rows=4, shard_rows=10) as w:
        for i, b in enumerate(blobs):
            w.write({"b": b, "i": i})
    reader = ReadOnlyDataset(tmp_path, "p")
    assert next(reader)["b"] == blobs[0]
    got = list(reader)  # starts inside the first batch
    assert [r["b"] for r in got] == blobs[1:]
    assert all(type(r["b"]) is bytes for r in got)
    view = ReadOnlyDataset(tmp_path, "p", zero_copy=True)[5]["b"]
    reader.close()  # copies and views outlive the reader's maps
    assert [r["b"] for r in got] == blobs[1:] and view == blobs[5]
