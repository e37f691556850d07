"""Datasets on a real S3 server (moto on loopback) through s3:// URIs."""

from __future__ import annotations

import pyarrow.fs as pafs
import pytest

from kpl_dataset import (
    BasicType,
    FileType,
    KPLDatasetError,
    ReadOnlyDataset,
    WriteOnlyDataset,
    list_parts,
    set_size_threshold,
)
from kpl_dataset import reader as reader_module


def test_write_read_random_access_and_streaming(s3_uri, all_types):
    record_type, make = all_types
    records = [make(i) for i in range(50)]
    with WriteOnlyDataset(s3_uri, "训练", record_type, batch_rows=4, shard_rows=12) as w:
        for r in records:
            w.write(r)
    assert list_parts(s3_uri) == ["训练"]
    reader = ReadOnlyDataset(s3_uri, None)
    assert len(reader) == 50
    assert reader[37] == records[37]
    assert reader[-1] == records[-1]
    assert reader[3:9] == records[3:9]
    # Streaming: iterating never keeps more than a few batches in memory.
    reader.reset()  # reader[-1] moved the cursor to the end, as in the original
    assert list(reader) == records
    assert len(reader._batches) <= reader_module._REMOTE_CACHE
    assert reader.to_arrow().num_rows == 50
    reader.verify()
    projected = ReadOnlyDataset(s3_uri, "训练", columns=["i"])
    assert [r["i"] for r in projected] == [r["i"] for r in records]


def test_append_replace_and_metadb(s3_uri):
    rt = {"n": BasicType.Int}
    with WriteOnlyDataset(s3_uri, None, rt) as w:
        w.write({"n": 1})
    with WriteOnlyDataset(s3_uri, None, rt, mode="a") as w:
        w.write({"n": 2})
    assert [r["n"] for r in ReadOnlyDataset(s3_uri, None)] == [1, 2]
    with WriteOnlyDataset(s3_uri, None, rt) as w:
        w.write({"n": 3})
    reader = ReadOnlyDataset(s3_uri, None)
    assert [r["n"] for r in reader] == [3]
    fs, root = pafs.FileSystem.from_uri(s3_uri)
    stored = fs.get_file_info(pafs.FileSelector(root + "/root.kpl", recursive=True))
    assert [i.path for i in stored] == [root + "/" + s.path for s in reader.manifest.shards]
    db = reader.get_meta_db()
    db.put("classes", ["猫", "狗"])
    assert ReadOnlyDataset(s3_uri, None).get_meta_db().get("classes") == ["猫", "狗"]


def test_uncommitted_writer_is_invisible(s3_uri):
    w = WriteOnlyDataset(s3_uri, None, {"n": BasicType.Int}, batch_rows=1, shard_rows=1)
    for i in range(3):
        w.write({"n": i})
    with pytest.raises(KPLDatasetError, match="Not found dataset"):
        ReadOnlyDataset(s3_uri, None)
    w.abort()


def test_large_file_on_s3(s3_uri, tmp_path):
    source = tmp_path / "big.bin"
    source.write_bytes(bytes(range(256)) * 40)
    set_size_threshold(1000)
    try:
        with WriteOnlyDataset(s3_uri, None, {"f": BasicType.File}) as w:
            w.write({"f": str(source)})
    finally:
        set_size_threshold(50 * (1 << 20))
    reader = ReadOnlyDataset(s3_uri, None)
    value = reader[0]["f"]
    assert value["type"] == FileType.Large
    assert reader.read_file(value) == source.read_bytes()


def test_missing_shard_on_s3(s3_uri):
    with WriteOnlyDataset(s3_uri, None, {"n": BasicType.Int}) as w:
        w.write({"n": 1})
    reader = ReadOnlyDataset(s3_uri, None)
    fs, root = pafs.FileSystem.from_uri(s3_uri)
    fs.delete_file(root + "/" + reader.manifest.shards[0].path)
    with pytest.raises(KPLDatasetError, match="missing"):
        ReadOnlyDataset(s3_uri, None)[0]
