"""Adapter for loose files: one file per record plus a JSON index of the small fields."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any


def write(root: str, payload: Any, n: int) -> None:
    """Write records/<i>.bin for each record, then index.json atomically."""
    folder = os.path.join(root, "records")
    os.makedirs(folder, exist_ok=True)
    index = []
    for i in range(n):
        data, path, content_type, label = payload.record(i)
        name = f"records/{i:08d}.bin"
        with open(os.path.join(root, name), "wb") as f:
            f.write(data)
        index.append({"file": name, "path": path, "contentType": content_type, "label": label})
    tmp = os.path.join(root, "index.json.tmp")
    with open(tmp, "w") as f:
        json.dump(index, f)
    os.replace(tmp, os.path.join(root, "index.json"))


def open_reader(root: str) -> tuple[str, list]:
    with open(os.path.join(root, "index.json")) as f:
        return root, json.load(f)


def _read(root: str, entry: dict) -> tuple:
    with open(os.path.join(root, entry["file"]), "rb") as f:
        data = f.read()
    return data, entry["path"], entry["contentType"], entry["label"]


def scan(reader: tuple[str, list]) -> Iterator[tuple]:
    root, index = reader
    for entry in index:
        yield _read(root, entry)


def get(reader: tuple[str, list], i: int) -> tuple:
    root, index = reader
    return _read(root, index[i])


def close(reader: tuple[str, list]) -> None:
    """Nothing to release: each record's file is closed after reading."""
