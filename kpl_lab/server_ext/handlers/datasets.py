"""Datasets: list, upload (import), show, delete, pages of records, one field, thumbnails, stats."""

from __future__ import annotations

import asyncio
import functools
import json

from tornado import web

from ...api.catalog import Deleted
from ...api.datasets import DatasetList, DatasetVersionDetail, ImportList, RecordsPage, Stats
from ...catalog.datasets import check_import, field_url
from ...catalog.datasets_view import THUMBNAIL_MAX, THUMBNAIL_MIN, DatasetView
from ...catalog.serialize import dataset_detail_model, matches, named_model, version_model
from ...catalog.storage import check_name
from ...errors import BadRequest
from ..base import OFFSET_MAX, KPLHandler
from ..imports import DatasetImport
from ..upload import UploadHandler

PAGE_MAX = 1000
# types a browser would run as a page in the server's origin: served as text instead
ACTIVE_TYPES = (
    "text/html",
    "application/xhtml+xml",
    "image/svg+xml",
    "text/javascript",
    "application/javascript",
)


@web.stream_request_body
class DatasetsHandler(UploadHandler):
    """GET: the project's datasets (`?q=` searches); POST: upload an archive as a new version."""

    _import: DatasetImport | None = None

    @web.authenticated
    async def get(self) -> None:
        """List datasets."""
        query = self.get_query_argument("q", None)
        rows = await self.blocking(self.platform.catalog.list_datasets, self.project)
        self.reply(DatasetList(datasets=[named_model("dataset", d) for d in rows if matches(d, query)]))

    def check_upload_query(self) -> None:
        """Check name, format and part before the body is stored."""
        name = self.get_query_argument("name", None)
        if not name:
            raise BadRequest("name: give the dataset a name (?name=)", field="name")
        check_name(name)
        check_import(
            self.get_query_argument("format", "import"),
            self.get_query_argument("part", None),
            self.get_query_argument("split", None),
        )
        self.project  # noqa: B018 - refuse a forbidden project before the body arrives
        self.app.imports.check_room()

    @web.authenticated
    async def post(self) -> None:
        """Import the uploaded archive on the import workers and answer the new version."""
        shown_as = self.get_query_argument("filename", None) or "the upload"
        archive = self.finish_upload()
        name = self.get_query_argument("name")
        form = self.get_query_argument("format", "import")
        self._import = DatasetImport(self.project, name, form, shown_as)
        self.upload_in_use = True
        try:
            row = await self.app.imports.submit(
                self._import,
                functools.partial(
                    self.platform.catalog.import_dataset,
                    self.project,
                    name,
                    archive,
                    form=form,
                    part=self.get_query_argument("part", None) or None,
                    split=self.get_query_argument("split", None) or None,
                    description=self.get_query_argument("description", ""),
                    shown_as=shown_as,
                ),
            )
        except asyncio.CancelledError:
            return  # dropped while queued: its client went away (or the server stops)
        finally:
            self.upload_in_use = False
            self._discard()
        self.reply(version_model("dataset", row), status=201)

    def on_connection_close(self) -> None:
        """Drop the import of a client that went away while it was still queued."""
        if self._import is not None:
            self.app.imports.cancel(self._import)
        super().on_connection_close()


class ImportsHandler(KPLHandler):
    """GET: the project's dataset imports in flight (queued or importing)."""

    @web.authenticated
    async def get(self) -> None:
        """List imports in flight."""
        self.reply(ImportList(imports=self.app.imports.list(self.project)))


class DatasetHandler(KPLHandler):
    """GET: a dataset and its versions; DELETE: every version."""

    @web.authenticated
    async def get(self, name: str) -> None:
        """Show a dataset."""
        version = await self.blocking(self.platform.catalog.get_dataset, self.project, name)
        self.reply(named_model("dataset", version.dataset))

    @web.authenticated
    async def delete(self, name: str) -> None:
        """Delete a dataset."""
        self.reply(
            Deleted(deleted=await self.blocking(self.platform.catalog.delete_dataset, self.project, name))
        )


class VersionBase(KPLHandler):
    """A handler of one dataset version."""

    def open_view(self, name: str, version: str) -> tuple[object, DatasetView]:
        """Return the version row and its view (blocking: call through `blocking`)."""
        return self.platform.catalog.open_dataset(self.project, name, version)

    def field_url(self, name: str, version: str) -> callable:
        """Return (part, index, field path) -> URL of the field route."""
        return field_url(self.api_base, self.project, name, version)


class DatasetVersionHandler(VersionBase):
    """GET: one version with parts, schemas, record count and size; DELETE: that version."""

    @web.authenticated
    async def get(self, name: str, version: str) -> None:
        """Show a dataset version."""

        def work() -> DatasetVersionDetail:
            row, view = self.open_view(name, version)
            return dataset_detail_model(row, view.schemas())

        self.reply(await self.blocking(work))

    @web.authenticated
    async def delete(self, name: str, version: str) -> None:
        """Delete a dataset version."""
        check_name(version, "version")
        self.reply(
            Deleted(
                deleted=await self.blocking(
                    self.platform.catalog.delete_dataset, self.project, f"{name}:{version}"
                )
            )
        )


class RecordsHandler(VersionBase):
    """GET: a page of records with only the columns asked for."""

    @web.authenticated
    async def get(self, name: str, version: str) -> None:
        """Answer a page of records."""
        offset = self.query_int("offset", 0, 0, OFFSET_MAX)
        limit = self.query_int("limit", 50, 1, PAGE_MAX)
        columns_text = self.get_query_argument("columns", "")
        columns = [c.strip() for c in columns_text.split(",") if c.strip()] or None
        part = self.get_query_argument("part", None)

        def work() -> RecordsPage:
            row, view = self.open_view(name, version)
            return RecordsPage.model_validate(
                view.page(part, offset, limit, columns, self.field_url(name, row.version))
            )

        self.reply(await self.blocking(work))


class FieldHandler(VersionBase):
    """GET: one field of one record, raw with its content type, or as a thumbnail PNG."""

    @web.authenticated
    async def get(self, name: str, version: str, index: str, field: str) -> None:
        """Answer the field's content."""
        part = self.get_query_argument("part", None)
        size = self.get_query_argument("thumbnail", None)
        size_px = self.query_int("thumbnail", 128, THUMBNAIL_MIN, THUMBNAIL_MAX) if size is not None else None

        # more digits than any record count: not found (int() of thousands of digits raises)
        record = int(index) if len(index) <= 18 else -1

        def work():
            _, view = self.open_view(name, version)
            if size_px is not None:
                return view.thumbnail(part, record, field, size_px), "image/png"
            return view.field(part, record, field)

        # a thumbnail is drawn in the project's sandbox: its wait holds no thread of the server's pool
        value, kind = await (self.sandboxed(work) if size_px is not None else self.blocking(work))
        self.set_header("Cache-Control", "private, max-age=86400, immutable")  # versions never change
        if kind is None:
            self.finish(json.dumps(value, default=str))
        else:
            self.set_header("X-Content-Type-Options", "nosniff")
            if kind.split(";")[0].strip().lower() in ACTIVE_TYPES:
                kind = "text/plain; charset=utf-8"
            self.finish(value, set_content_type=kind)


class StatsHandler(VersionBase):
    """GET: per-field stats and per-class counts."""

    @web.authenticated
    async def get(self, name: str, version: str) -> None:
        """Answer the stats of a part."""
        part = self.get_query_argument("part", None)

        def work() -> Stats:
            _, view = self.open_view(name, version)
            return Stats.model_validate(view.stats(part))

        self.reply(await self.blocking(work))
