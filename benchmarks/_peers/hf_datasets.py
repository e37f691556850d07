"""Adapter for Hugging Face `datasets`: Arrow files written by save_to_disk, read by load_from_disk."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import datasets

datasets.disable_progress_bars()
FEATURES = datasets.Features(
    {
        "data": datasets.Value("binary"),
        "path": datasets.Value("string"),
        "contentType": datasets.Value("string"),
        "label": datasets.Value("int64"),
    }
)


def _records(size: int, n: int) -> Iterator[dict]:
    # Rebuilt here from (size, n) so that datasets can fingerprint the generator cheaply.
    from payload import Payload

    payload = Payload(size)
    for i in range(n):
        data, path, content_type, label = payload.record(i)
        yield {"data": data, "path": path, "contentType": content_type, "label": label}


def write(root: str, payload: Any, n: int) -> None:
    """Build the dataset with from_generator (into a cache folder), then save_to_disk."""
    cache = os.path.join(root, "cache")
    ds = datasets.Dataset.from_generator(
        _records, features=FEATURES, cache_dir=cache, gen_kwargs={"size": payload.size, "n": n}
    )
    ds.save_to_disk(os.path.join(root, "ds"))


def cleanup(root: str) -> None:
    """Drop from_generator's cache folder (not timed): only the saved dataset is read back."""
    shutil.rmtree(os.path.join(root, "cache"))


def open_reader(root: str) -> Any:
    return datasets.load_from_disk(os.path.join(root, "ds"))


def scan(reader: Any) -> Iterator[tuple]:
    for r in reader:
        yield r["data"], r["path"], r["contentType"], r["label"]


def get(reader: Any, i: int) -> tuple:
    r = reader[i]
    return r["data"], r["path"], r["contentType"], r["label"]


def close(reader: Any) -> None:
    """Nothing to release: datasets keeps its memory maps until the process ends."""
