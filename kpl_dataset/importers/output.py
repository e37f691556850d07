"""Write the parts of an import so that a failed run leaves no dataset behind."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from kpl_dataset import WriteOnlyDataset, list_parts
from kpl_dataset.importers.safety import ImportFailed

DEFAULT_PART = "root"


class DatasetOutput:
    """Collect the parts of one import; commit them all at the end or none of them.

    A new dataset is written in a hidden staging folder beside DEST and renamed into
    place at the end. Into an existing dataset each part is added by its writer, which
    makes nothing visible until it is closed.
    """

    def __init__(self, dest: str | os.PathLike[str]) -> None:
        self.dest = Path(dest)
        if self.dest.exists() and not self.dest.is_dir():
            raise ImportFailed(f"{self.dest}: exists and is not a folder")
        self._in_place = self.dest.is_dir() and any(self.dest.iterdir())
        if self._in_place:
            self.target = self.dest
            self._taken = set(list_parts(str(self.dest)))
            if not self._taken:
                raise ImportFailed(f"{self.dest}: folder is not empty and holds no dataset")
        else:
            self.dest.parent.mkdir(parents=True, exist_ok=True)
            # mkdir (not mkdtemp) so the dataset gets the usual umask permissions.
            self.target = self.dest.parent / f".{self.dest.name}.importing-{uuid.uuid4().hex[:12]}"
            self.target.mkdir()
            self._taken = set()
        self._writers: dict[str, WriteOnlyDataset] = {}
        self._properties: dict[str, dict[str, Any]] = {}
        self.counts: dict[str, int] = {}

    def part(self, name: str | None, record_type: dict, properties: dict[str, Any] | None = None) -> None:
        """Open a new part NAME (None: the default part) with meta db PROPERTIES saved at commit."""
        name = name or DEFAULT_PART
        if name in self._taken or name in self._writers:
            raise ImportFailed(f"{self.dest}: part {name!r} already exists")
        writer = WriteOnlyDataset(str(self.target), name, record_type)
        self._writers[name] = writer
        self._properties[name] = properties or {}
        self.counts[name] = 0

    def write(self, name: str | None, record: dict[str, Any]) -> None:
        """Write one record to the open part NAME."""
        name = name or DEFAULT_PART
        self._writers[name].write(record)
        self.counts[name] += 1

    def commit(self) -> None:
        """Close every part and make the dataset visible."""
        for name, writer in self._writers.items():
            db = writer.get_meta_db()
            for key, value in self._properties[name].items():
                db.put(key, value)
            writer.close()
        if self._in_place:
            return
        if self.dest.is_dir():
            self.dest.rmdir()  # empty: checked at start; refuses if someone filled it since
        os.rename(self.target, self.dest)

    def abort(self) -> None:
        """Drop everything this import wrote."""
        for writer in self._writers.values():
            writer.abort()
        if not self._in_place:
            shutil.rmtree(self.target, ignore_errors=True)

    def __enter__(self) -> DatasetOutput:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            try:
                self.commit()
            except BaseException:
                self.abort()
                raise
        else:
            self.abort()
