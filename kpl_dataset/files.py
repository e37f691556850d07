"""BasicType.File values: inline small files, copy large ones beside the shards."""

from __future__ import annotations

import io
import os
from typing import Any, BinaryIO

from kpl_dataset.errors import KPLDatasetError
from kpl_dataset.fs import Location


class FileType:
    """Where a File value's bytes live (values kept from kpl-dataset 0.0.9)."""

    Small = 0
    Large = 1


_SIZE_THRESHOLD = 50 * (1 << 20)
PREVIEW_BYTES = 512
_COPY_CHUNK = 8 << 20


def set_size_threshold(size: int) -> None:
    """Set the size (bytes) above which File values are stored as separate files."""
    global _SIZE_THRESHOLD
    _SIZE_THRESHOLD = int(size)


def size_threshold() -> int:
    """Return the current File size threshold."""
    return _SIZE_THRESHOLD


def copy_to(loc: Location, source: str, target: str, durable: bool = False) -> None:
    """Copy a local file into the dataset location (fsynced too when durable and local)."""
    if loc.local:
        with open(source, "rb") as src, open(loc.path(target), "wb") as dst:
            while chunk := src.read(_COPY_CHUNK):
                dst.write(chunk)
            if durable:
                dst.flush()
                os.fsync(dst.fileno())
        return
    with open(source, "rb") as src, loc.fs.open_output_stream(loc.path(target)) as dst:
        while chunk := src.read(_COPY_CHUNK):
            dst.write(chunk)


def open_file_value(loc: Location, value: Any) -> BinaryIO:
    """Open the full content of a File value read from a dataset."""
    if not isinstance(value, dict) or "type" not in value:
        raise KPLDatasetError(f"not a File value: {value!r:.80}")
    if value["type"] == FileType.Small:
        return io.BytesIO(value["content"])
    path = value.get("file_path") or ""
    try:
        return loc.fs.open_input_file(loc.path(path))
    except FileNotFoundError:
        raise KPLDatasetError(f"{loc.describe(path)}: large file named by the dataset is missing") from None
    except OSError as err:
        raise KPLDatasetError(f"{loc.describe(path)}: cannot open ({err})") from err


class FileAs(str):
    """A local path to write as a File value of the given FileType whatever its size.

    The legacy importer uses it so that imported values keep their Small or Large form.
    """

    form: int

    def __new__(cls, path: str, form: int) -> FileAs:
        self = super().__new__(cls, path)
        self.form = form
        return self


def read_source(path: str) -> tuple[int, bytes, int]:
    """Return (size, whole content or first bytes, FileType) of a local file.

    Large above the size threshold, unless path is a FileAs that says.
    """
    size = os.path.getsize(path)
    form = getattr(path, "form", None)
    if form is None:
        form = FileType.Small if size <= _SIZE_THRESHOLD else FileType.Large
    with open(path, "rb") as f:
        data = f.read() if form == FileType.Small else f.read(PREVIEW_BYTES)
    return size, data, form
