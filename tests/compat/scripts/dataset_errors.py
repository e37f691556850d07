"""Make the mistakes old code makes with kpl-dataset 0.0.9; report what is raised."""

import os
import tempfile

import _report as report

from kpl_dataset import BasicType, ReadOnlyDataset, WriteOnlyDataset

root = tempfile.mkdtemp()
record_type = {
    "i": BasicType.Int,
    "s": BasicType.String,
    "b": BasicType.ByteArray,
    "f": BasicType.Float,
    "l": [BasicType.Int],
    "m": {"a": BasicType.Int, "z": [BasicType.Float]},
    "file": BasicType.File,
}
writer = WriteOnlyDataset(root, "train", record_type)
# (name, bad record, a word both messages contain, or None to compare the type only)
mistakes = [
    ("unknown key", {"i": 1, "zz": 2}, "zz"),
    ("Int given str", {"i": "a"}, "'a'"),
    ("Int given float", {"i": 1.5}, "1.5"),
    ("Int given None", {"i": None}, "None"),
    ("Int over 64 bits", {"i": 1 << 70}, str(1 << 70)),
    ("String given int", {"s": 3}, "int"),
    ("String given bytes", {"s": b"x"}, "bytes"),
    ("ByteArray given str", {"b": "x"}, "'x'"),
    ("ByteArray given int", {"b": 3}, "int"),
    ("Float given str", {"f": "x"}, "'x'"),
    ("list given int", {"l": 3}, "int"),
    ("list item given str", {"l": ["a"]}, "'a'"),
    ("dict given int", {"m": 3}, None),
    ("unknown nested key", {"m": {"q": 1}}, "q"),
    ("File missing", {"file": os.path.join(root, "absent.bin")}, "absent.bin"),
    ("record is a list", [1], "list"),
    ("record is None", None, "NoneType"),
]
for name, record, gist in mistakes:
    report.call(name, lambda record=record: writer.write(record), gist=gist)
writer.write({"i": 7})
writer.close()
report.call("write after close", lambda: writer.write({"i": 1}), gist="closed")
report.value("only the good record was written", list(ReadOnlyDataset(root, "train")))

bad_types = [
    ("record_type empty", {}, "dict"),
    ("record_type list of two", {"a": [BasicType.Int, BasicType.Int]}, "list"),
    ("record_type unknown leaf", {"a": "Nope"}, "Nope"),
    ("record_type key not str", {1: BasicType.Int}, "must be"),
]
for i, (name, bad, gist) in enumerate(bad_types):
    report.call(
        name, lambda bad=bad, i=i: WriteOnlyDataset(os.path.join(root, f"bad{i}"), None, bad), gist=gist
    )

empty = tempfile.mkdtemp()
report.call("open a folder with no dataset", lambda: ReadOnlyDataset(empty, None), gist="Not found dataset")
report.done()
