"""Streamed uploads: the request body goes to a temporary file, refused past a size limit."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import IO

from tornado import web

from ..errors import BadRequest
from .base import KPLHandler

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


class UploadHandler(KPLHandler):
    """A handler whose POST body is streamed to a temporary file (`self.upload`) under the limit.

    Authentication and the query are checked in `prepare`, before a byte is stored; the
    file is removed when the request ends, whatever happened.
    """

    upload: Path | None = None
    # set while a worker reads the upload: a client that goes away must not pull it from under it
    upload_in_use = False
    _upload_file: IO[bytes] | None = None
    _upload_dir: Path | None = None
    _received = 0

    async def prepare(self) -> None:
        """Refuse unauthenticated or oversized uploads before the body arrives."""
        await super().prepare()
        if self.request.method != "POST":
            return
        if not self.current_user:
            raise web.HTTPError(403)
        self.check_upload_query()
        limit = self.app.max_upload_bytes
        declared = self.request.headers.get("Content-Length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise BadRequest(f"the upload is {int(declared)} bytes, the limit is {limit} bytes", field="body")
        self.request.connection.set_max_body_size(limit + 1)
        uploads = Path(self.platform.home) / "uploads"
        uploads.mkdir(parents=True, exist_ok=True)
        self._upload_dir = Path(tempfile.mkdtemp(prefix="upload-", dir=uploads))
        self.upload = self._upload_dir / "upload"
        self._upload_file = open(self.upload, "wb")  # noqa: SIM115 - closed in on_finish

    def check_upload_query(self) -> None:
        """Check the query arguments of an upload (override)."""

    def data_received(self, chunk: bytes) -> None:
        """Append a piece of the body to the temporary file, within the limit."""
        if self._upload_file is None:
            return
        self._received += len(chunk)
        if self._received > self.app.max_upload_bytes:
            self._discard()  # a chunked body with no Content-Length: refused once it is known
            return
        self._upload_file.write(chunk)

    def finish_upload(self, name: str = "upload", archive: bool = True) -> Path:
        """Close the temporary file and return it, renamed with its archive suffix when it has one.

        `archive=False`: the upload is one file whatever its first bytes (a TorchScript model is a zip).
        """
        if self._received > self.app.max_upload_bytes:
            raise BadRequest(
                f"the upload passed the limit of {self.app.max_upload_bytes} bytes", field="body"
            )
        if self._upload_file is None or self.upload is None:
            raise BadRequest("the upload is missing", field="body")
        self._upload_file.close()
        if self._received == 0:
            raise BadRequest(
                "the upload is empty: send the zip or tar file as the request body", field="body"
            )
        suffix = archive_suffix(self.upload) if archive else None
        if suffix is not None:
            named = self.upload.with_name(name + suffix)
            self.upload.rename(named)
            self.upload = named
        return self.upload

    def _discard(self) -> None:
        if self._upload_file is not None:
            self._upload_file.close()
            self._upload_file = None
        if self._upload_dir is not None:
            shutil.rmtree(self._upload_dir, ignore_errors=True)
            self._upload_dir = None

    def on_finish(self) -> None:
        """Remove the temporary file."""
        self._discard()
        super().on_finish()

    def on_connection_close(self) -> None:
        """Remove the temporary file of an upload the client abandoned (once no worker reads it)."""
        super().on_connection_close()
        if not self.upload_in_use:
            self._discard()
