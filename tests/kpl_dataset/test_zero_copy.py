"""Zero-copy reads (zero_copy=True) and Arrow record batches (iter_batches) against the bytes path."""

from __future__ import annotations

import gc
import pickle

import pyarrow as pa
import pytest

from kpl_dataset import BasicType, ReadOnlyDataset, WriteOnlyDataset

RT = {
    "data": BasicType.ByteArray,
    "path": BasicType.String,
    "label": BasicType.Int,
    "score": BasicType.Float,
    "ok": BasicType.Bool,
    "meta": {"raw": BasicType.ByteArray, "tags": [BasicType.String]},
}


def _record(i: int) -> dict:
    # Bytes >= 128 catch a signed memoryview format, empty values catch zero-length slices.
    return {
        "data": bytes((i * 7 + k) % 256 for k in range(i % 5 * 97)),
        "path": f"images/{i:04d}.jpg",
        "label": i % 3,
        "score": i / 4,
        "ok": i % 2 == 0,
        "meta": {"raw": bytes([200 + i % 50]), "tags": ["a"] * (i % 3)},
    }


@pytest.fixture
def folder(tmp_path):
    with WriteOnlyDataset(tmp_path, "p", RT, batch_rows=7) as w:
        for i in range(30):
            w.write(_record(i))
    return tmp_path


def test_zero_copy_values_equal_the_bytes_values(folder):
    with ReadOnlyDataset(folder, "p") as plain, ReadOnlyDataset(folder, "p", zero_copy=True) as zero:
        for i, (a, b) in enumerate(zip(plain, zero, strict=True)):
            assert type(a["data"]) is bytes and type(b["data"]) is memoryview
            assert b["data"].readonly and b["data"].format == "B"
            assert b["data"] == a["data"] == _record(i)["data"]
            assert bytes(b["data"]) == a["data"]
            # The other fields are the same Python values as without zero_copy.
            assert {k: v for k, v in b.items() if k != "data"} == {k: v for k, v in a.items() if k != "data"}
        for i in (0, 6, 7, 29, -1):
            assert zero[i]["data"] == plain[i]["data"]
            assert isinstance(zero[i]["data"], memoryview)
        assert [r["data"] for r in zero[3:9]] == [r["data"] for r in plain[3:9]]


def test_zero_copy_next_and_cursor(folder):
    with ReadOnlyDataset(folder, "p", zero_copy=True) as r:
        assert r.next()["data"] == _record(0)["data"]
        assert [x["label"] for x in r][:2] == [1, 2]


def test_zero_copy_values_outlive_close(folder):
    r = ReadOnlyDataset(folder, "p", zero_copy=True)
    views = [rec["data"] for rec in r]
    one = r[13]["data"]
    r.close()
    del r
    gc.collect()
    # Each view holds the Arrow buffer, which holds the memory map: reading it stays valid.
    assert [bytes(v) for v in views] == [_record(i)["data"] for i in range(30)]
    assert one == _record(13)["data"]


def test_zero_copy_reader_survives_pickling(folder):
    r = ReadOnlyDataset(folder, "p", zero_copy=True)
    copy = pickle.loads(pickle.dumps(r))
    assert isinstance(copy[4]["data"], memoryview) and copy[4]["data"] == _record(4)["data"]


def test_zero_copy_with_columns_and_verify(folder):
    with ReadOnlyDataset(folder, "p", zero_copy=True, columns=["data"], verify="full") as r:
        assert [bytes(x["data"]) for x in r] == [_record(i)["data"] for i in range(30)]


def test_iter_batches_yields_the_schema_columns(folder):
    with ReadOnlyDataset(folder, "p") as r:
        batches = list(r.iter_batches())
        assert [b.num_rows for b in batches] == [7, 7, 7, 7, 2]
        for b in batches:
            assert isinstance(b, pa.RecordBatch)
            assert b.schema.equals(r.arrow_schema)
            assert b.schema.names == list(RT)
        table = pa.Table.from_batches(batches)
        assert table.column("data").to_pylist() == [_record(i)["data"] for i in range(30)]
        assert table.column("meta").to_pylist() == [_record(i)["meta"] for i in range(30)]
        assert [b.num_rows for b in r.iter_batches(batch_size=10)] == [10, 10, 10]


def test_iter_batches_of_a_projection(folder):
    with ReadOnlyDataset(folder, "p", columns=["label", "data"]) as r:
        for b in r.iter_batches():
            assert b.schema.names == ["label", "data"]
        assert r.to_arrow().column("label").to_pylist() == [i % 3 for i in range(30)]


def test_iter_batches_buffers_outlive_close(folder):
    r = ReadOnlyDataset(folder, "p")
    batches = list(r.iter_batches())
    r.close()
    del r
    gc.collect()
    assert pa.Table.from_batches(batches).column("path").to_pylist() == [
        f"images/{i:04d}.jpg" for i in range(30)
    ]
