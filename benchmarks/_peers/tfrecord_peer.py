"""Adapter for the `tfrecord` package: one .tfrecord file plus its index for random reads."""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from typing import Any

import numpy as np
from tfrecord import example_pb2
from tfrecord.reader import example_loader, extract_feature_dict
from tfrecord.tools.tfrecord2idx import create_index
from tfrecord.writer import TFRecordWriter

DESCRIPTION = {"data": "byte", "path": "byte", "contentType": "byte", "label": "int"}
_TYPENAMES = {"byte": "bytes_list", "float": "float_list", "int": "int64_list"}


def _paths(root: str) -> tuple[str, str]:
    return os.path.join(root, "data.tfrecord"), os.path.join(root, "data.tfindex")


def write(root: str, payload: Any, n: int) -> None:
    """Write n tf.Example records, then the index file random reads need."""
    data_path, index_path = _paths(root)
    writer = TFRecordWriter(data_path)
    for i in range(n):
        data, path, content_type, label = payload.record(i)
        writer.write(
            {
                "data": (data, "byte"),
                "path": (path.encode(), "byte"),
                "contentType": (content_type.encode(), "byte"),
                "label": (label, "int"),
            }
        )
    writer.close()
    create_index(data_path, index_path)


def _row(features: dict) -> tuple:
    return (
        features["data"],
        features["path"].decode(),
        features["contentType"].decode(),
        int(features["label"][0]),
    )


class Reader:
    """The data file held open and the index loaded as tfrecord's own loader does (np.loadtxt)."""

    def __init__(self, root: str):
        data_path, index_path = _paths(root)
        self.data_path = data_path
        self.offsets = np.loadtxt(index_path, dtype=np.int64)[:, 0].tolist()
        self.file = open(data_path, "rb")  # noqa: SIM115 - closed by close()


def open_reader(root: str) -> Reader:
    return Reader(root)


def scan(reader: Reader) -> Iterator[tuple]:
    for features in example_loader(reader.data_path, None, DESCRIPTION):
        yield _row(features)


def get(reader: Reader, i: int) -> tuple:
    """Seek to the index offset, read one framed record and decode it with tfrecord's helpers."""
    f = reader.file
    f.seek(reader.offsets[i])
    (length,) = struct.unpack("<Q", f.read(8))
    f.seek(4, os.SEEK_CUR)
    example = example_pb2.Example()
    example.ParseFromString(f.read(length))
    return _row(extract_feature_dict(example.features, DESCRIPTION, _TYPENAMES))


def close(reader: Reader) -> None:
    reader.file.close()
