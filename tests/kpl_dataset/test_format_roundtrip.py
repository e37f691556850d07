"""Round trips of every field type through WriteOnlyDataset and ReadOnlyDataset."""

from __future__ import annotations

import json
import os

import pyarrow as pa
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
from kpl_dataset.common import ClassificationDatasetDefine, RectangleBoxObjectDetectionDatasetDefine


def test_original_detection_code_runs_unchanged(tmp_path, detection_record):
    data_dir = str(tmp_path)
    writer = WriteOnlyDataset(data_dir, None, RectangleBoxObjectDetectionDatasetDefine)
    for i in range(30):
        writer.write(detection_record(i))
    writer.close()

    reader = ReadOnlyDataset(data_dir, None)
    assert len(reader) == 30
    assert reader.record_type == RectangleBoxObjectDetectionDatasetDefine
    first = reader.next()
    assert first == detection_record(0)
    assert [r["path"] for r in reader] == [detection_record(i)["path"] for i in range(1, 30)]
    with pytest.raises(StopIteration):
        reader.next()
    reader.reset()
    assert next(reader) == detection_record(0)
    assert reader[17] == detection_record(17)
    assert reader[-1] == detection_record(29)
    reader.close()


def test_original_classification_code_runs_unchanged(tmp_path):
    writer = WriteOnlyDataset(str(tmp_path), "train", ClassificationDatasetDefine)
    rows = [
        {
            "path": f"{c}/{i}.png",
            "content": os.urandom(100),
            "contentType": "image/png",
            "class_name": c,
            "class_id": k,
        }
        for k, c in enumerate(["猫", "狗"])
        for i in range(5)
    ]
    for row in rows:
        writer.write(row)
    writer.close()
    reader = ReadOnlyDataset(str(tmp_path), "train")
    assert list(reader) == rows
    # None opens the only part when there is no "root", as the original did.
    assert ReadOnlyDataset(str(tmp_path), None)[3] == rows[3]


@pytest.mark.parametrize("batch_rows,shard_rows", [(1024, 1 << 20), (3, 7), (1, 2)])
def test_all_types_round_trip_across_batches_and_shards(tmp_path, batch_rows, shard_rows, all_types):
    ALL_TYPES, all_types_record = all_types
    records = [all_types_record(i) for i in range(40)]
    with WriteOnlyDataset(tmp_path, "全部", ALL_TYPES, batch_rows=batch_rows, shard_rows=shard_rows) as w:
        for r in records:
            w.write(r)
    with ReadOnlyDataset(tmp_path, "全部") as reader:
        assert len(reader) == 40
        assert [reader[i] for i in range(40)] == records
        assert reader[-40] == records[0]
        assert reader[5:30:4] == records[5:30:4]
        assert reader[::-1] == records[::-1]
        reader.reset()  # reader[i] moved the cursor to i + 1, as in the original
        assert list(reader) == records
        with pytest.raises(IndexError):
            reader[40]
        with pytest.raises(IndexError):
            reader[-41]
        table = reader.to_arrow()
        assert table.num_rows == 40 and table.schema == reader.arrow_schema
        assert table.to_pylist() == records
        sizes = [b.num_rows for b in reader.iter_batches(batch_size=6)]
        assert sizes == [6] * 6 + [4]
        reader.verify()
    assert list_parts(tmp_path) == ["全部"]


def test_empty_dataset(tmp_path, all_types):
    ALL_TYPES, all_types_record = all_types
    WriteOnlyDataset(tmp_path, None, ALL_TYPES).close()
    reader = ReadOnlyDataset(tmp_path, None)
    assert len(reader) == 0
    assert list(reader) == []
    assert reader[:] == []
    assert reader.to_arrow().num_rows == 0
    with pytest.raises(IndexError):
        reader[0]


def test_lenient_values_are_normalised(tmp_path):
    np = pytest.importorskip("numpy")
    rt = {
        "f": BasicType.Float,
        "i": BasicType.Int,
        "b": BasicType.Bool,
        "raw": BasicType.ByteArray,
        "l": [BasicType.Int],
    }
    with WriteOnlyDataset(tmp_path, None, rt) as w:
        w.write({"f": 3, "i": np.int32(7), "b": np.bool_(True), "raw": bytearray(b"ab"), "l": (1, 2)})
        w.write({"f": np.float32(0.5), "i": True, "b": False, "raw": memoryview(b"cd"), "l": np.arange(3)})
    reader = ReadOnlyDataset(tmp_path, None)
    assert reader[0] == {"f": 3.0, "i": 7, "b": True, "raw": b"ab", "l": [1, 2]}
    assert reader[1] == {"f": 0.5, "i": 1, "b": False, "raw": b"cd", "l": [0, 1, 2]}
    assert type(reader[0]["f"]) is float


def test_file_fields_small_inline_large_copied(tmp_path):
    small = tmp_path / "small.bin"
    small.write_bytes(b"s" * 100)
    large = tmp_path / "large.bin"
    large.write_bytes(os.urandom(5000))
    out = tmp_path / "ds"
    set_size_threshold(1000)
    try:
        with WriteOnlyDataset(out, None, {"f": BasicType.File, "files": [BasicType.File]}) as w:
            w.write({"f": str(small), "files": [large, str(small)]})
    finally:
        set_size_threshold(50 * (1 << 20))
    reader = ReadOnlyDataset(out, None)
    rec = reader[0]
    assert rec["f"] == {"type": FileType.Small, "content": b"s" * 100, "file_path": "", "size": 100}
    big = rec["files"][0]
    assert big["type"] == FileType.Large and big["size"] == 5000
    assert big["content"] == large.read_bytes()[:512]
    assert (out / big["file_path"]).is_file()
    assert reader.read_file(big) == large.read_bytes()
    assert reader.read_file(rec["f"]) == b"s" * 100
    manifest = json.loads((out / "root.manifest.json").read_text())
    assert [f["path"] for f in manifest["files"]] == [big["file_path"]]


def test_file_field_missing_source_names_record(tmp_path):
    with (
        WriteOnlyDataset(tmp_path, None, {"f": BasicType.File}) as w,
        pytest.raises(KPLDatasetError, match=r"record 0, field f: cannot read file .*nope"),
    ):
        w.write({"f": str(tmp_path / "nope")})


def test_columns_projection_reads_only_named_fields(tmp_path):
    with WriteOnlyDataset(tmp_path, None, ClassificationDatasetDefine) as w:
        for i in range(10):
            w.write(
                {
                    "path": f"p{i}",
                    "content": b"x" * 1000,
                    "contentType": "t",
                    "class_name": "c",
                    "class_id": i,
                }
            )
    reader = ReadOnlyDataset(tmp_path, None, columns=["class_id", "path"])
    assert reader[3] == {"class_id": 3, "path": "p3"}
    assert reader.record_type == {"class_id": BasicType.Int, "path": BasicType.String}
    assert reader.arrow_schema.names == ["class_id", "path"]
    assert reader.to_arrow().column("class_id").to_pylist() == list(range(10))
    with pytest.raises(KPLDatasetError, match="not in the dataset"):
        ReadOnlyDataset(tmp_path, None, columns=["nope"])


def test_shards_are_plain_arrow_ipc_files(tmp_path, all_types):
    ALL_TYPES, all_types_record = all_types
    with WriteOnlyDataset(tmp_path, None, ALL_TYPES, batch_rows=4) as w:
        for i in range(10):
            w.write(all_types_record(i))
    manifest = json.loads((tmp_path / "root.manifest.json").read_text())
    (shard,) = manifest["shards"]
    with pa.memory_map(str(tmp_path / shard["path"])) as source:
        ipc = pa.ipc.open_file(source)
        assert ipc.num_record_batches == 3
        assert ipc.read_all().to_pylist() == [all_types_record(i) for i in range(10)]


def test_several_parts_in_one_folder(tmp_path, all_types):
    ALL_TYPES, all_types_record = all_types
    for name, n in (("train", 5), ("test", 2), ("root", 1)):
        with WriteOnlyDataset(tmp_path, name, ALL_TYPES) as w:
            for i in range(n):
                w.write(all_types_record(i))
    assert list_parts(tmp_path) == ["root", "test", "train"]
    assert len(ReadOnlyDataset(tmp_path, None)) == 1
    assert len(ReadOnlyDataset(tmp_path, "train")) == 5
    with pytest.raises(KPLDatasetError, match="part 'val' not found"):
        ReadOnlyDataset(tmp_path, "val")


def test_missing_dataset_errors(tmp_path):
    with pytest.raises(KPLDatasetError, match="Not found dataset"):
        ReadOnlyDataset(tmp_path, None)
    (tmp_path / "root.meta").write_text("x")
    with pytest.raises(KPLDatasetError, match="kpl-dataset legacy"):
        ReadOnlyDataset(tmp_path, None)


def test_pandas_export(tmp_path):
    pytest.importorskip("pandas")
    with WriteOnlyDataset(tmp_path, None, {"a": BasicType.Int}) as w:
        w.write({"a": 1})
    assert ReadOnlyDataset(tmp_path, None).to_pandas()["a"].tolist() == [1]
