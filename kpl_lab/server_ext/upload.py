"""Streamed uploads: the request body goes to a temporary file, refused past a size limit, then to its operation."""

from __future__ import annotations

import asyncio
import functools
from typing import IO, Any

from tornado import web

from ..errors import BadRequest
from ..operations.datasets import shown_as
from ..operations.uploads import Upload, upload_folder
from .base import OperationHandler
from .imports import DatasetImport


@web.stream_request_body
class UploadHandler(OperationHandler):
    """A route whose POST body is streamed to a temporary file (`self.upload`) under the limit.

    Authentication and the query (the operation's `check`) are checked in `prepare`, before a
    byte is stored; the file is removed when the request ends, whatever happened.
    """

    upload: Upload | None = None
    # set while a worker reads the upload: a client that goes away must not pull it from under it
    upload_in_use = False
    _upload_file: IO[bytes] | None = None
    _received = 0
    _arguments: dict[str, Any]

    async def prepare(self) -> None:
        """Refuse unauthenticated or oversized uploads, and a query the operation refuses, before the body arrives."""
        await super().prepare()
        if self.request.method != "POST":
            return
        if not self.current_user:
            raise web.HTTPError(403)
        self._arguments = self.arguments(self.path_args)
        self.operation.check(self.caller, **self._arguments)
        limit = self.app.max_upload_bytes
        declared = self.request.headers.get("Content-Length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise BadRequest(f"the upload is {int(declared)} bytes, the limit is {limit} bytes", field="body")
        self.request.connection.set_max_body_size(limit + 1)
        self.upload = Upload(upload_folder(self.platform.home) / "upload")
        self._upload_file = open(self.upload.path, "wb")  # noqa: SIM115 - closed in on_finish

    def data_received(self, chunk: bytes) -> None:
        """Append a piece of the body to the temporary file, within the limit."""
        if self._upload_file is None:
            return
        self._received += len(chunk)
        if self._received > self.app.max_upload_bytes:
            self._discard()  # a chunked body with no Content-Length: refused once it is known
            return
        self._upload_file.write(chunk)

    def finish_upload(self) -> Upload:
        """Close the temporary file and return the upload, refused past the limit."""
        if self._received > self.app.max_upload_bytes:
            raise BadRequest(
                f"the upload passed the limit of {self.app.max_upload_bytes} bytes", field="body"
            )
        if self._upload_file is None or self.upload is None:
            raise BadRequest("the upload is missing", field="body")
        self._upload_file.close()
        return self.upload

    @web.authenticated
    async def post(self, *path: str) -> None:
        """Run the operation on the uploaded file and answer what it returns."""
        arguments = {**self._arguments, "upload": self.finish_upload()}
        self.upload_in_use = True
        try:
            result = await self.perform(arguments)
        except asyncio.CancelledError:
            return  # dropped while queued: its client went away (or the server stops)
        finally:
            self.upload_in_use = False
        await self.answer(result)

    def _discard(self) -> None:
        if self._upload_file is not None:
            self._upload_file.close()
            self._upload_file = None
        if self.upload is not None:
            self.upload.remove()
            self.upload = None

    def on_finish(self) -> None:
        """Remove the temporary file."""
        self._discard()
        super().on_finish()

    def on_connection_close(self) -> None:
        """Remove the temporary file of an upload the client abandoned (once no worker reads it)."""
        super().on_connection_close()
        if not self.upload_in_use:
            self._discard()


@web.stream_request_body
class DatasetUploadHandler(UploadHandler):
    """Uploads of datasets, imported on the host's import workers (listed by `GET /imports` while they wait)."""

    _import: DatasetImport | None = None

    async def perform(self, arguments: dict[str, Any]) -> Any:
        """Queue the import on the import workers (a listing runs on the pool as usual)."""
        if "upload" not in arguments:
            return await super().perform(arguments)
        caller = self.caller
        self._import = DatasetImport(
            caller.project, arguments["name"], arguments["format"], shown_as(arguments["filename"])
        )
        return await self.app.imports.submit(
            self._import, functools.partial(self.operation.run, caller, **arguments)
        )

    def on_connection_close(self) -> None:
        """Drop the import of a client that went away while it was still queued."""
        if self._import is not None:
            self.app.imports.cancel(self._import)
        super().on_connection_close()
