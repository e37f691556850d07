"""Adapter for `webdataset`: tar shards read in order; it has no random access by index."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from typing import Any

import webdataset as wds

SHARD_BYTES = 256 << 20  # the same shard size as ours


def write(root: str, payload: Any, n: int) -> None:
    """Write n samples into shard-NNNNNN.tar files."""
    pattern = os.path.join(root, "shard-%06d.tar")
    with wds.ShardWriter(pattern, maxsize=SHARD_BYTES, maxcount=1 << 30, verbose=0) as sink:
        for i in range(n):
            data, path, content_type, label = payload.record(i)
            sink.write(
                {"__key__": f"{i:08d}", "bin": data, "path.txt": path, "ct.txt": content_type, "cls": label}
            )


def open_reader(root: str) -> Any:
    shards = sorted(glob.glob(os.path.join(root, "shard-*.tar")))
    return wds.WebDataset(shards, shardshuffle=False, empty_check=False)


def scan(reader: Any) -> Iterator[tuple]:
    for s in reader:
        yield s["bin"], s["path.txt"].decode(), s["ct.txt"].decode(), int(s["cls"])


get = None  # webdataset reads tar streams in order: no lookup of record i


def close(reader: Any) -> None:
    """Nothing to release: the pipeline closes each shard when it is exhausted."""
