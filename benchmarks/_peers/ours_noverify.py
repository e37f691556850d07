"""Adapter for our kpl_dataset read with verify=False: shows what the default batch checksum costs."""

from __future__ import annotations

from ours import close, get, scan, write

from kpl_dataset import ReadOnlyDataset

__all__ = ["close", "get", "open_reader", "scan", "write"]


def open_reader(root: str) -> ReadOnlyDataset:
    return ReadOnlyDataset(root, "root", verify=False)
