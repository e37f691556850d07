"""Resolve a dataset location (path or pyarrow.fs URI) and do the few file operations we need."""

from __future__ import annotations

import contextlib
import os
import posixpath
import uuid
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

from kpl_dataset.errors import KPLDatasetError


@dataclass(frozen=True)
class Location:
    """A dataset folder on some filesystem."""

    fs: pafs.FileSystem
    root: str
    local: bool

    def path(self, name: str) -> str:
        """Return the full path of a name relative to the dataset folder."""
        return posixpath.join(self.root, name) if self.root else name

    def describe(self, name: str) -> str:
        """Return a path to show in error messages."""
        if self.local:
            return self.path(name)
        return f"{self.fs.type_name}://{self.path(name)}"

    def exists(self, name: str) -> bool:
        """Say whether a file exists."""
        return self.fs.get_file_info(self.path(name)).type == pafs.FileType.File

    def list(self, folder: str = "", recursive: bool = False) -> list[str]:
        """List file names (relative to the dataset folder) under a sub-folder."""
        base = self.path(folder) if folder else self.root
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(base, allow_not_found=True, recursive=recursive))
        except (OSError, pa.ArrowException) as err:
            raise KPLDatasetError(f"cannot list {self.describe(folder)}: {err}") from err
        prefix = self.root.rstrip("/") + "/" if self.root else ""
        return sorted(
            i.path[len(prefix) :] if prefix and i.path.startswith(prefix) else i.path
            for i in infos
            if i.type == pafs.FileType.File
        )

    def read_bytes(self, name: str) -> bytes:
        """Read a whole (small) file."""
        with self.fs.open_input_stream(self.path(name)) as f:
            return f.read()

    def write_atomic(self, name: str, data: bytes, durable: bool = True) -> None:
        """Make name hold data, never a partial write: temp file + rename locally, one PUT remotely.

        durable also fsyncs the file and its folder, so that the rename survives a power loss.
        """
        if not self.local:
            with self.fs.open_output_stream(self.path(name)) as f:
                f.write(data)
            return
        folder, base = posixpath.split(self.path(name))
        tmp = posixpath.join(folder, f".{base}.{uuid.uuid4().hex}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                if durable:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, self.path(name))
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        if durable:
            sync_dir(folder)

    def delete(self, name: str) -> None:
        """Delete a file if it exists."""
        with contextlib.suppress(FileNotFoundError):
            self.fs.delete_file(self.path(name))

    def makedirs(self, name: str = "") -> None:
        """Create a sub-folder (and parents)."""
        self.fs.create_dir(self.path(name) if name else self.root, recursive=True)


def sync_dir(folder: str) -> None:
    """Flush a local directory entry so a rename survives power loss."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def resolve(data_dir: str | os.PathLike, filesystem: pafs.FileSystem | None = None) -> Location:
    """Turn a local path, file:// URI or any pyarrow.fs URI (s3://, hdfs://...) into a Location."""
    if filesystem is not None:
        local = isinstance(filesystem, pafs.LocalFileSystem)
        root = os.path.abspath(os.fspath(data_dir)) if local else os.fspath(data_dir).rstrip("/")
        return Location(filesystem, root, local)
    text = os.fspath(data_dir)
    if "://" not in text:
        return Location(pafs.LocalFileSystem(), os.path.abspath(text), True)
    try:
        fs, root = pafs.FileSystem.from_uri(text)
    except (pa.ArrowException, OSError, ValueError) as err:
        raise KPLDatasetError(f"cannot open dataset location {text!r}: {err}") from err
    local = isinstance(fs, pafs.LocalFileSystem)
    return Location(fs, root.rstrip("/") if not local else root, local)
