"""Adapter for the original kpl-dataset 0.0.9 (protobuf records), run inside its own venv."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kpl_dataset import BasicType, ReadOnlyDataset, WriteOnlyDataset

RECORD_TYPE = {
    "data": BasicType.ByteArray,
    "path": BasicType.String,
    "contentType": BasicType.String,
    "label": BasicType.Int,
}


def write(root: str, payload: Any, n: int) -> None:
    """Write n records into part "root"."""
    ds = WriteOnlyDataset(root, "root", RECORD_TYPE)
    for i in range(n):
        data, path, content_type, label = payload.record(i)
        ds.write({"data": data, "path": path, "contentType": content_type, "label": label})
    ds.close()


def open_reader(root: str) -> Any:
    return ReadOnlyDataset(root, "root")


def scan(reader: Any) -> Iterator[tuple]:
    for r in reader:
        yield r["data"], r["path"], r["contentType"], r["label"]


def get(reader: Any, i: int) -> tuple:
    r = reader[i]
    return r["data"], r["path"], r["contentType"], r["label"]


def close(reader: Any) -> None:
    reader.close()
