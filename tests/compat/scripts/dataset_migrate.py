"""Datasets of the original: written and read back by it, or migrated and read back by ours.

Under the original this writes the datasets into $COMPAT_DATASET and reads them; under
ours it migrates that folder (`kpl-dataset legacy`) and reads the result. The test runs
the original first; the two reports must be equal.
"""

import os
from pathlib import Path

import _report as report

import kpl_dataset
from kpl_dataset import BasicType, ReadOnlyDataset, WriteOnlyDataset, set_size_threshold
from kpl_dataset.common import ClassificationDatasetDefine, RectangleBoxObjectDetectionDatasetDefine

source = os.environ["COMPAT_DATASET"]
work = os.environ["COMPAT_WORK"]
ours = hasattr(kpl_dataset, "KPLDatasetError")


def write_with_the_original():
    small, large = os.path.join(work, "small.bin"), os.path.join(work, "large.bin")
    Path(small).write_bytes(b"small" * 20)
    Path(large).write_bytes(bytes(range(256)) * 10)
    set_size_threshold(1000)  # the 2560-byte file becomes a large file
    record_type = {**RectangleBoxObjectDetectionDatasetDefine, "mask": BasicType.File}
    writer = WriteOnlyDataset(source, "train", record_type)
    writer.write(
        {"path": "a.jpg", "content": b"\x00\x01", "object": [{"name": "狗", "xmin": 3, "score": 0.5}]}
    )
    writer.write({"path": "b.jpg", "mask": small})
    writer.write({"path": "c.jpg", "mask": large, "contentType": "image/png"})
    writer.get_meta_db().put("classes", ["狗", "猫"])
    writer.get_meta_db().put("info", {"n": 3, "split": 0.8})
    writer.close()
    writer = WriteOnlyDataset(source, None, ClassificationDatasetDefine)
    for i in range(4):
        writer.write({"path": f"{i}.jpg", "class_name": "猫" if i % 2 else "狗", "class_id": i % 2})
    writer.close()


if ours:
    from kpl_dataset.importers import migrate_legacy

    data_dir = os.path.join(work, "migrated")
    migrate_legacy(source, data_dir)
else:
    write_with_the_original()
    data_dir = source

for part in ("train", None):
    reader = ReadOnlyDataset(data_dir, part)
    records = []
    for record in reader:
        if "mask" in record:
            mask = dict(record["mask"])
            path = mask.pop("file_path")
            mask["whole"] = Path(data_dir, path).read_bytes() if path else None  # where it is kept differs
            record["mask"] = mask
        records.append(record)
    report.value(f"{part} record_type", reader.record_type)
    report.value(f"{part} records", records)
    db = reader.get_meta_db()
    report.value(f"{part} meta db", {key: db.get(key) for key in db.keys()})  # noqa: SIM118 - MetaDB is no dict
report.done()
