"""The body of an upload as the operations see it: a file in a folder of its own, or bytes in memory."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..errors import BadRequest

# first bytes -> a suffix the archive readers recognise
_ARCHIVE_MAGIC = (
    (b"PK\x03\x04", 0, ".zip"),
    (b"PK\x05\x06", 0, ".zip"),
    (b"\x1f\x8b", 0, ".tar.gz"),
    (b"BZh", 0, ".tar.bz2"),
    (b"\xfd7zXZ\x00", 0, ".tar.xz"),
    (b"ustar", 257, ".tar"),
)


def archive_suffix(path: Path) -> str | None:
    """Return the archive suffix that matches a file's first bytes, or None."""
    with open(path, "rb") as file:
        head = file.read(512)
    for magic, offset, suffix in _ARCHIVE_MAGIC:
        if head[offset : offset + len(magic)] == magic:
            return suffix
    return None


def upload_folder(home: str | os.PathLike) -> Path:
    """Return a new folder under the home's `uploads/` for one upload (its caller removes it)."""
    uploads = Path(home) / "uploads"
    uploads.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="upload-", dir=uploads))


class Upload:
    """What a request uploaded: a file named `upload` in a folder of its own, or bytes (a prediction's body)."""

    def __init__(
        self,
        path: Path | None = None,
        data: bytes | None = None,
        content_type: str = "application/octet-stream",
        header: Callable[[str], str | None] = lambda name: None,
    ) -> None:
        self.path, self.data = path, data
        self.content_type, self.header = content_type, header

    @classmethod
    def of_file(cls, source: str | os.PathLike, home: str | os.PathLike) -> Upload:
        """Return an upload of a file on this machine, as a request would have streamed it (a link, else a copy)."""
        path = upload_folder(home) / "upload"
        with contextlib.suppress(OSError):  # another filesystem, or links refused there
            os.link(source, path)
            return cls(path)
        shutil.copyfile(source, path)
        return cls(path)

    def read(self) -> bytes:
        """Return the body's bytes."""
        return self.data if self.data is not None else self.path.read_bytes()

    def archive(self, name: str = "upload", archive: bool = True) -> Path:
        """Return the uploaded file, renamed `name` with its archive suffix when its first bytes are an archive's.

        `archive=False`: the upload is one file whatever its first bytes (a TorchScript model is a zip).
        """
        if self.path is None or not self.path.exists():
            raise BadRequest("the upload is missing", field="body")
        if self.path.stat().st_size == 0:
            raise BadRequest(
                "the upload is empty: send the zip or tar file as the request body", field="body"
            )
        suffix = archive_suffix(self.path) if archive else None
        if suffix is not None:
            self.path = self.path.rename(self.path.with_name(name + suffix))
        return self.path

    def remove(self) -> None:
        """Remove the upload's folder."""
        if self.path is not None:
            shutil.rmtree(self.path.parent, ignore_errors=True)
