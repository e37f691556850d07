"""Nullable top-level fields: real nulls written, read back as None, older parts unchanged."""

import json

import pyarrow as pa
import pytest

from kpl_dataset import ReadOnlyDataset, WriteOnlyDataset
from kpl_dataset.errors import DatasetTypeError, DatasetValueError, DefinitionError

TYPE = {"id": "String", "mask": "ByteArray", "object": [{"name": "String", "xmin": "Int"}]}


def test_nullable_fields_round_trip_as_none(tmp_path):
    with WriteOnlyDataset(tmp_path, "root", TYPE, nullable=["mask", "object"]) as w:
        w.write({"id": "a", "mask": b"m", "object": [{"name": "apple", "xmin": 3}]})
        w.write({"id": "b", "mask": None, "object": None})
        w.write({"id": "c"})
    r = ReadOnlyDataset(tmp_path)
    assert list(r) == [
        {"id": "a", "mask": b"m", "object": [{"name": "apple", "xmin": 3}]},
        {"id": "b", "mask": None, "object": None},
        {"id": "c", "mask": None, "object": None},
    ]
    assert r[1] == {"id": "b", "mask": None, "object": None}
    assert r.nullable == ["mask", "object"]
    table = r.to_arrow()
    assert table.column("mask").null_count == 2
    assert table.schema.field("mask").nullable and not table.schema.field("id").nullable
    assert json.loads((tmp_path / "root.manifest.json").read_bytes())["nullable"] == ["mask", "object"]


def test_parts_without_nullable_keep_their_manifest_and_refuse_none(tmp_path):
    with WriteOnlyDataset(tmp_path, "root", {"id": "String"}) as w:
        w.write({"id": "a"})
        with pytest.raises(DatasetTypeError, match="expected String"):
            w.write({"id": None})
    assert "nullable" not in json.loads((tmp_path / "root.manifest.json").read_bytes())
    assert list(ReadOnlyDataset(tmp_path)) == [{"id": "a"}]


def test_nullable_must_name_fields(tmp_path):
    with pytest.raises(DefinitionError, match="not fields"):
        WriteOnlyDataset(tmp_path, "root", {"id": "String"}, nullable=["nope"])


def test_write_batch_takes_arrow_and_checks_nulls(tmp_path):
    batch = pa.record_batch({"id": ["a", "b"], "mask": pa.array([b"x", None], pa.binary())})
    with WriteOnlyDataset(tmp_path, "root", {"id": "String", "mask": "ByteArray"}, nullable=["mask"]) as w:
        w.write({"id": "z", "mask": b"z"})
        w.write_batch(batch)
    assert list(ReadOnlyDataset(tmp_path)) == [
        {"id": "z", "mask": b"z"},
        {"id": "a", "mask": b"x"},
        {"id": "b", "mask": None},
    ]
    w = WriteOnlyDataset(tmp_path, "other", {"id": "String", "mask": "ByteArray"})
    with pytest.raises(DatasetValueError, match="mask holds nulls"):
        w.write_batch(batch)
    w.abort()
