"""Old code that encodes records and record types itself with kpl-dataset 0.0.9's RecordDefine."""

import os
import tempfile

import _report as report

from kpl_dataset.record import BasicType, RecordDefine, define, set_size_threshold

root = tempfile.mkdtemp()
os.mkdir(os.path.join(root, "files"))
small, large = os.path.join(root, "small.bin"), os.path.join(root, "large.bin")
with open(small, "wb") as f:
    f.write(b"\x00small")
with open(large, "wb") as f:
    f.write(bytes(range(256)) * 4)
record_type = {
    "i": BasicType.Int,
    "s": BasicType.String,
    "b": BasicType.ByteArray,
    "f": BasicType.Float,
    "l": [BasicType.Int],
    "m": {"a": BasicType.Int, "z": [BasicType.Float]},
    "objects": [{"name": BasicType.String, "box": [BasicType.Int]}],
    "file": BasicType.File,
}
record = {
    "i": -7,
    "s": "猫 cat",
    "b": b"\xff\x00",
    "f": 0.25,
    "l": [1, 2, 3],
    "m": {"a": 1, "z": [0.5]},
    "objects": [{"name": "apple", "box": [1, 2, 3, 4]}, {"name": "kiwi", "box": []}],
    "file": small,
}

encoded = RecordDefine.encode(record, record_type)
report.call("a record round trip", lambda: RecordDefine.decode(encoded, record_type))
report.value("a field of the message", encoded.map["i"].int64_field)
report.call(
    "a partial record: the rest read as defaults",
    lambda: RecordDefine.decode(RecordDefine.encode({"i": 1}, record_type), record_type),
)

meta = RecordDefine.encode_meta(record_type, "train", 1)
report.value("meta id and version", [meta.id, meta.version])
report.value("meta keys in order", list(meta.record_type.keys))
report.value("record type round trip", RecordDefine.decode_meta(meta.record_type))
copied = define.Meta()
copied.CopyFrom(meta)
report.value("a copied meta", RecordDefine.decode_meta(copied.record_type))
report.call("an unknown type", lambda: RecordDefine.encode_meta({"x": "Complex"}, "t", 1), gist="Complex")
report.call("an empty record type", lambda: RecordDefine.encode_meta({}, "t", 1), gist="empty")
report.call("a list of two types", lambda: RecordDefine.encode_meta({"l": [BasicType.Int] * 2}, "t", 1))
report.call("a value of an unknown type", lambda: RecordDefine.decode_basic(define.Feature(), "Complex"))

gbk = define.Feature()
gbk.bytes_field = "中文".encode("gbk")
report.value("text that is not UTF-8 reads as GBK", RecordDefine.decode_basic(gbk, BasicType.String))

# a file over the threshold: its first 512 bytes, and a copy under ROOT/files
set_size_threshold(100)
RecordDefine.ROOT = root
big = RecordDefine.decode(
    RecordDefine.encode({"file": large}, {"file": BasicType.File}), {"file": BasicType.File}
)
report.value(
    "a large file's type, size and first bytes",
    [big["file"]["type"], big["file"]["size"], big["file"]["content"]],
)
report.value("a large file is copied under ROOT/files", big["file"]["file_path"].startswith("files/"))
with open(os.path.join(root, big["file"]["file_path"]), "rb") as f:
    report.value("the copy holds the file", f.read() == bytes(range(256)) * 4)
report.done()
