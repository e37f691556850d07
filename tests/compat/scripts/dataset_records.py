"""Write and read datasets as kpl-dataset 0.0.9 code does; report what comes back."""

import os
import tempfile
from pathlib import Path

import _report as report

from kpl_dataset import BasicType, FileType, MetaDB, ReadOnlyDataset, WriteOnlyDataset, set_size_threshold
from kpl_dataset.common import ClassificationDatasetDefine, RectangleBoxObjectDetectionDatasetDefine
from kpl_dataset.dataset import ReadOnlyDataset as ReaderByOldName
from kpl_dataset.record import BasicType as BasicTypeByOldName

root = tempfile.mkdtemp()
report.value("old module names", [ReaderByOldName is ReadOnlyDataset, BasicTypeByOldName.File])
report.value("FileType", [FileType.Small, FileType.Large])

# Classification with a default part, missing fields left to their defaults.
classification = os.path.join(root, "classification")
writer = WriteOnlyDataset(classification, None, ClassificationDatasetDefine)
for i in range(5):
    writer.write(
        {
            "path": f"img/{i}.jpg",
            "content": bytes([i]) * 10,
            "contentType": "image/jpeg",
            "class_name": "猫",
            "class_id": i,
        }
    )
writer.write({"path": "only-a-path.jpg"})
writer.write({"class_id": True})  # a bool is an Int to both
writer.get_meta_db().put("classes", ["猫", "狗"])
writer.close()
reader = ReadOnlyDataset(classification, None)
report.value("classification len", len(reader))
report.value("classification record_type", reader.record_type)
report.value("classification records", list(reader))
report.call("classification next at the end", reader.next)
reader.reset()
report.value("classification after reset", reader.next())
report.value("classification meta", reader.get_meta_db().get("classes"))

# Detection: nested lists of dicts, tuples for lists, ints for floats, missing nested fields.
detection = os.path.join(root, "detection")
writer = WriteOnlyDataset(detection, "train", RectangleBoxObjectDetectionDatasetDefine)
writer.write(
    {
        "path": "a.jpg",
        "content": b"\x00\xff" * 50,
        "contentType": "image/jpeg",
        "object": [
            {"name": "dog", "xmin": 1, "xmax": 20, "ymin": 2, "ymax": 30, "difficult": 0, "score": 0.75},
            {"name": "cat", "xmin": 5, "ymin": 6, "score": 1},
        ],
    }
)
writer.write({"path": "b.jpg", "object": ({"name": "empty"},)})
writer.write({"path": "c.jpg", "object": []})
writer.close()
reader = ReadOnlyDataset(detection, "train")
report.value("detection records", [reader[i] for i in range(len(reader))])

# Every type, nested maps and lists of lists.
everything = {
    "s": BasicType.String,
    "i": BasicType.Int,
    "f": BasicType.Float,
    "b": BasicType.ByteArray,
    "grid": [[BasicType.Int]],
    "box": {"w": BasicType.Int, "tags": [BasicType.String], "inner": {"v": BasicType.Float}},
}
nested = os.path.join(root, "nested")
writer = WriteOnlyDataset(nested, "part", everything)
writer.write(
    {
        "s": "é",
        "i": -(1 << 62),
        "f": 1e-300,
        "b": b"",
        "grid": [[1, 2], [], [3]],
        "box": {"w": 1, "tags": ["x"]},
    }
)
writer.write({"box": {}})
writer.write({})
writer.close()
report.value("nested records", list(ReadOnlyDataset(nested, "part")))

# File values: small inline, large copied beside the dataset (threshold lowered).
files = os.path.join(root, "files")
small, large = os.path.join(root, "small.bin"), os.path.join(root, "large.bin")
with open(small, "wb") as f:
    f.write(b"s" * 100)
with open(large, "wb") as f:
    f.write(bytes(range(256)) * 12)
set_size_threshold(1000)
writer = WriteOnlyDataset(files, None, {"name": BasicType.String, "file": BasicType.File})
writer.write({"name": "small", "file": small})
writer.write({"name": "large", "file": large})
writer.write({"name": "none"})
writer.close()
got = []
for record in ReadOnlyDataset(files, None):
    value = dict(record["file"])
    path = value.pop("file_path")
    # Where a large file is kept differs; that the path reaches its bytes does not.
    value["whole"] = Path(files, path).read_bytes() if path else None
    got.append([record["name"], value])
report.value("file records", got)

# Random access then next(): next() continues after the record read by index.
cursor = os.path.join(root, "cursor")
writer = WriteOnlyDataset(cursor, None, {"i": BasicType.Int, "tag": BasicType.String})
for i in range(10):
    writer.write({"i": i + 100, "tag": f"t{i}"})  # records of one size: the original seeks by it
writer.close()
reader = ReadOnlyDataset(cursor, None)
report.value("cursor next", [reader.next()["i"], reader.next()["i"]])
report.value("cursor index then next", [reader[6]["i"], reader.next()["i"], next(reader)["i"]])
report.value("cursor index by numpy-like int", reader[3.0]["i"])
report.call("index past the end", lambda: reader[10], gist="")
report.call("index not a number", lambda: reader["x"], gist="'x'")

# MetaDB: the dataset's store, and opened by the original's .prop path.
db = ReadOnlyDataset(cursor, None).get_meta_db()
report.value("metadb empty", [db.keys(), db.get("x"), db.has("x")])
db.put("info", {"n": 2, "score": 0.5, "names": ["a", "b"], "nested": [{"k": "v"}]})
db.put("count", 3)
report.call("metadb put again", lambda: db.put("count", 4), gist="already exist")
report.call("metadb update missing", lambda: db.update("nope", 1), gist="nope")
report.call("metadb key not str", lambda: db.put(1, 1), gist="1")
report.call("metadb merge non-MetaDB", lambda: db.merge_from({}), gist="MetaDB")
db.update("count", 5)
db.delete("nope")
db.put("gone", "x")
db.delete("gone")
report.value("metadb after edits", [sorted(db.keys()), db.get("info"), db.get("count"), db.has("gone")])
report.value("metadb str", sorted(str(db).splitlines()))
by_path = MetaDB(os.path.join(cursor, "root.prop"))
report.value("metadb by .prop path", [by_path.get("count"), sorted(by_path.keys())])
other = MetaDB(os.path.join(root, "standalone.prop"))
other.put("count", 9)
other.put("extra", "e")
db.merge_from(other)
report.value("metadb merged", [db.get("count"), db.get("extra")])

report.done()
