"""Adapter for our kpl_dataset (Arrow IPC shards, memory-mapped reads)."""

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


def open_reader(root: str) -> ReadOnlyDataset:
    return ReadOnlyDataset(root, "root")


def _row(r: dict) -> tuple:
    return r["data"], r["path"], r["contentType"], r["label"]


def scan(reader: ReadOnlyDataset) -> Iterator[tuple]:
    for r in reader:
        yield _row(r)


def get(reader: ReadOnlyDataset, i: int) -> tuple:
    return _row(reader[i])


def close(reader: ReadOnlyDataset) -> None:
    reader.close()
