"""The file names of a dataset folder: parts, their manifests and MetaDBs (no pyarrow needed)."""

from __future__ import annotations

from typing import Any

from kpl_dataset.errors import KPLDatasetError

DEFAULT_PART = "root"
MANIFEST_SUFFIX = ".manifest.json"


def check_part_name(name: Any) -> str:
    """Return the part name or raise if it cannot be a file name."""
    if name is None:
        return DEFAULT_PART
    if not isinstance(name, str) or not name:
        raise KPLDatasetError(f"data_name must be a non-empty string, got {name!r}")
    if name.startswith(".") or any(c in name for c in "/\\\0") or len(name.encode()) > 200:
        raise KPLDatasetError(
            f"data_name {name!r} is not usable as a file name (no '/', '\\', NUL, leading '.', max 200 bytes)"
        )
    return name


def manifest_name(part: str) -> str:
    """Return the manifest file name of a part."""
    return part + MANIFEST_SUFFIX


def meta_name(part: str) -> str:
    """Return the MetaDB file name of a part."""
    return part + ".meta.json"


def part_of(name: str) -> str | None:
    """Return the part whose committed manifest the file `name` is, or None for any other file."""
    if name.endswith(MANIFEST_SUFFIX) and "/" not in name and not name.startswith("."):
        return name[: -len(MANIFEST_SUFFIX)]
    return None
