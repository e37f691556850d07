"""Reference row: copy the dataset's bytes out of a memory-mapped file into fresh bytes objects.

Not a dataset format: the physical limit a record API can approach. The blobs are written
back to back into one file; a read maps it (Python's mmap) and slices one record-sized
bytes object at a time, which is one memcpy each, page faults of a fresh mapping included.
The small fields are loaded with the index when the reader opens, so they cost nothing.
"""

from __future__ import annotations

import json
import mmap
import os
from collections.abc import Iterator
from typing import Any


def write(root: str, payload: Any, n: int) -> None:
    """Write every blob into data.bin and the small fields into index.json."""
    index = {"size": payload.size, "path": [], "contentType": [], "label": []}
    with open(os.path.join(root, "data.bin"), "wb") as f:
        for i in range(n):
            data, path, content_type, label = payload.record(i)
            f.write(data)
            index["path"].append(path)
            index["contentType"].append(content_type)
            index["label"].append(label)
    with open(os.path.join(root, "index.json"), "w") as f:
        json.dump(index, f)


class Reader:
    """The mapped blob file and the small fields."""

    def __init__(self, root: str):
        with open(os.path.join(root, "index.json")) as f:
            index = json.load(f)
        self.size = index["size"]
        self.rows = list(zip(index["path"], index["contentType"], index["label"], strict=True))
        with open(os.path.join(root, "data.bin"), "rb") as f:
            self.map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def open_reader(root: str) -> Reader:
    return Reader(root)


def scan(reader: Reader) -> Iterator[tuple]:
    m, size = reader.map, reader.size
    for i, (path, content_type, label) in enumerate(reader.rows):
        yield m[i * size : (i + 1) * size], path, content_type, label


def get(reader: Reader, i: int) -> tuple:
    size = reader.size
    path, content_type, label = reader.rows[i]
    return reader.map[i * size : (i + 1) * size], path, content_type, label


def close(reader: Reader) -> None:
    reader.map.close()
