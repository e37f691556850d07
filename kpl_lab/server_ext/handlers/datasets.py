"""Datasets: list, upload (import), show, delete, pages of records, one field, thumbnails, stats."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from urllib.parse import quote, urlencode

from jupyter_server.utils import url_path_join
from tornado import web

from kpl_dataset import KPLDatasetError
from kpl_dataset.importers import (
    import_coco,
    import_imagefolder,
    import_labelme,
    import_raw,
    import_voc,
    parse_split,
)

from ...api.catalog import Deleted
from ...api.datasets import DatasetList, DatasetVersionDetail, RecordsPage, Stats
from ...catalog import datasets_view
from ...catalog.datasets_view import DatasetView
from ...catalog.serialize import dataset_detail_model, matches, named_model, version_model
from ...catalog.storage import check_name
from ...errors import BadRequest
from ..base import KPLHandler
from ..upload import UploadHandler

FORMATS = {
    "import": import_raw,
    "imagefolder": import_imagefolder,
    "voc": import_voc,
    "coco": import_coco,
    "labelme": import_labelme,
}
PAGE_MAX = 1000
# types a browser would run as a page in the server's origin: served as text instead
ACTIVE_TYPES = (
    "text/html",
    "application/xhtml+xml",
    "image/svg+xml",
    "text/javascript",
    "application/javascript",
)


def cache_dir(platform, project: str, name: str, version: str) -> Path:
    """Return the cache folder (thumbnails, stats) of one dataset version."""
    return platform.storage.root / "cache" / "projects" / project / "datasets" / name / version


def import_upload(
    platform,
    project: str,
    name: str,
    description: str,
    form: str,
    part: str | None,
    split: str | None,
    archive: Path,
    shown_as: str,
):
    """Import an uploaded archive with the hostile-safe importers and register it; nothing is left on failure."""
    with tempfile.TemporaryDirectory(prefix="import-", dir=archive.parent) as tmp:
        dest = Path(tmp) / "dataset"
        try:
            if form == "imagefolder":
                import_imagefolder(archive, dest, part, split=parse_split(split) if split else None)
            else:
                FORMATS[form](archive, dest, part)
        except KPLDatasetError as error:
            raise BadRequest(str(error).replace(str(archive), shown_as), field="body") from None
        return platform.catalog.add_dataset(project, name, dest, description)


@web.stream_request_body
class DatasetsHandler(UploadHandler):
    """GET: the project's datasets (`?q=` searches); POST: upload an archive as a new version."""

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
        form = self.get_query_argument("format", "import")
        if form not in FORMATS:
            raise BadRequest(f"format: {form!r} is not one of {', '.join(FORMATS)}", field="format")
        split = self.get_query_argument("split", None)
        if split:
            if form != "imagefolder":
                raise BadRequest(
                    "split: only the imagefolder format splits records into parts", field="split"
                )
            try:
                parse_split(split)
            except KPLDatasetError as error:
                raise BadRequest(f"split: {error}", field="split") from None
        part = self.get_query_argument("part", None)
        if part:
            check_name(part, "part")
        self.project  # noqa: B018 - refuse a forbidden project before the body arrives

    @web.authenticated
    async def post(self) -> None:
        """Import the uploaded archive and answer the new version."""
        shown_as = self.get_query_argument("filename", None) or "the upload"
        archive = self.finish_upload()
        row = await self.blocking(
            import_upload,
            self.platform,
            self.project,
            self.get_query_argument("name"),
            self.get_query_argument("description", ""),
            self.get_query_argument("format", "import"),
            self.get_query_argument("part", None) or None,
            self.get_query_argument("split", None) or None,
            archive,
            shown_as,
        )
        self.reply(version_model("dataset", row), status=201)


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
        self.reply(Deleted(deleted=await self.blocking(_delete, self.platform, self.project, name)))


def _delete(platform, project: str, ref: str) -> list[str]:
    """Delete versions, then their shared readers and caches."""
    deleted = platform.catalog.delete_dataset(project, ref)
    for done in deleted:
        name, _, version = done.partition(":")
        datasets_view.forget(platform.storage.dataset_dir(project, name, version))
        shutil.rmtree(cache_dir(platform, project, name, version), ignore_errors=True)
    return deleted


class VersionBase(KPLHandler):
    """A handler of one dataset version."""

    def open_view(self, name: str, version: str) -> tuple[object, DatasetView]:
        """Return the version row and its view (blocking: call through `blocking`)."""
        check_name(version, "version")
        row = self.platform.catalog.get_dataset(self.project, f"{name}:{version}")
        view = DatasetView(
            self.platform.catalog.path(row),
            cache_dir(self.platform, self.project, name, row.version),
            row.ref,
        )
        return row, view

    def field_url(self, name: str, version: str) -> callable:
        """Return (part, index, field path) -> URL of the field route."""
        base = url_path_join(
            self.base_url,
            "kpl/api/datasets",
            quote(name, safe=""),
            "versions",
            quote(version, safe=""),
            "records",
        )
        project = self.project

        def url(part: str, index: int, path: str) -> str:
            query = urlencode({"part": part, "project": project})
            return f"{base}/{index}/fields/{quote(path, safe='')}?{query}"

        return url


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
            Deleted(deleted=await self.blocking(_delete, self.platform, self.project, f"{name}:{version}"))
        )


class RecordsHandler(VersionBase):
    """GET: a page of records with only the columns asked for."""

    @web.authenticated
    async def get(self, name: str, version: str) -> None:
        """Answer a page of records."""
        offset = self.query_int("offset", 0, 0, 2**62)
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
        size_px = self.query_int("thumbnail", 128, 1, 1 << 20) if size is not None else None

        def work():
            _, view = self.open_view(name, version)
            if size_px is not None:
                return view.thumbnail(part, int(index), field, size_px), "image/png"
            return view.field(part, int(index), field)

        value, kind = await self.blocking(work)
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
