"""Datasets: list, upload (import), show, delete, pages of records, one field, thumbnails, stats."""

from __future__ import annotations

import json

from ..api.catalog import Deleted
from ..api.datasets import (
    Dataset,
    DatasetList,
    DatasetVersion,
    DatasetVersionDetail,
    ImportList,
    RecordsPage,
    Stats,
)
from ..catalog.datasets import check_import, field_url
from ..catalog.serialize import dataset_detail_model, matches, named_model, version_model
from ..catalog.storage import check_name
from ..errors import BadRequest
from .caller import Caller
from .spec import Raw
from .uploads import Upload

PAGE_MAX = 1000
# types a browser would run as a page in the server's origin: served as text instead
ACTIVE_TYPES = (
    "text/html",
    "application/xhtml+xml",
    "image/svg+xml",
    "text/javascript",
    "application/javascript",
)
# versions never change: a browser may keep what it read of one
FIELD_HEADERS = {"Cache-Control": "private, max-age=86400, immutable"}


def list_datasets(caller: Caller, q: str | None) -> DatasetList:
    """List the project's datasets (`q` searches names and descriptions)."""
    rows = caller.platform.catalog.list_datasets(caller.project)
    return DatasetList(datasets=[named_model("dataset", d) for d in rows if matches(d, q)])


def shown_as(filename: str | None) -> str:
    """Return how messages name an uploaded archive."""
    return filename or "the upload"


def check_upload(
    caller: Caller,
    name: str | None,
    description: str | None,
    format: str,
    part: str | None,
    filename: str | None,
    split: str | None,
) -> None:
    """Refuse an upload's name, format, part or split, or a full import queue, before its body is stored."""
    if not name:
        raise BadRequest("name: give the dataset a name (?name=)", field="name")
    check_name(name)
    check_import(format, part, split)
    if caller.imports is not None:
        caller.imports.check_room()


def add_dataset(
    caller: Caller,
    upload: Upload,
    name: str,
    description: str | None,
    format: str,
    part: str | None,
    filename: str | None,
    split: str | None,
) -> DatasetVersion:
    """Import an uploaded archive as a new version (the same content again: the same version)."""
    row = caller.platform.catalog.import_dataset(
        caller.project,
        name,
        upload.archive(),
        form=format,
        part=part or None,
        split=split or None,
        description=description or "",
        shown_as=shown_as(filename),
    )
    return version_model("dataset", row)


def list_imports(caller: Caller) -> ImportList:
    """List the project's dataset imports in flight (none where imports run at once, in their request)."""
    return ImportList(imports=caller.imports.list(caller.project) if caller.imports is not None else [])


def show_dataset(caller: Caller, name: str) -> Dataset:
    """Show a dataset and its versions."""
    return named_model("dataset", caller.platform.catalog.get_dataset(caller.project, name).dataset)


def delete_dataset(caller: Caller, name: str) -> Deleted:
    """Delete every version of a dataset."""
    return Deleted(deleted=caller.platform.catalog.delete_dataset(caller.project, name))


def show_version(caller: Caller, name: str, version: str) -> DatasetVersionDetail:
    """Show a dataset version with its parts, schemas, record count and size."""
    row, view = caller.platform.catalog.open_dataset(caller.project, name, version)
    return dataset_detail_model(row, view.schemas())


def delete_version(caller: Caller, name: str, version: str) -> Deleted:
    """Delete one dataset version."""
    check_name(version, "version")
    return Deleted(deleted=caller.platform.catalog.delete_dataset(caller.project, f"{name}:{version}"))


def records(
    caller: Caller,
    name: str,
    version: str,
    part: str | None,
    offset: int,
    limit: int,
    columns: str | None,
) -> RecordsPage:
    """Answer a page of records with only the (comma-separated) columns asked for."""
    wanted = [c.strip() for c in (columns or "").split(",") if c.strip()] or None
    row, view = caller.platform.catalog.open_dataset(caller.project, name, version)
    return RecordsPage.model_validate(
        view.page(part, offset, limit, wanted, field_url(caller.api_base, caller.project, name, row.version))
    )


def thumbnail_asked(arguments: dict) -> bool:
    """Say whether a field request asks for a thumbnail (drawn in the project's sandbox)."""
    return arguments.get("thumbnail") is not None


def field(
    caller: Caller,
    name: str,
    version: str,
    index: str,
    field: str,
    part: str | None,
    thumbnail: int | None,
) -> Raw:
    """Answer one field of one record, raw with its content type, or as a thumbnail PNG."""
    # more digits than any record count: not found (int() of thousands of digits raises)
    record = int(index) if len(index) <= 18 else -1
    _, view = caller.platform.catalog.open_dataset(caller.project, name, version)
    if thumbnail is not None:
        return Raw(view.thumbnail(part, record, field, thumbnail), "image/png", dict(FIELD_HEADERS))
    value, kind = view.field(part, record, field)
    if kind is None:
        return Raw(json.dumps(value, default=str).encode(), "application/json", dict(FIELD_HEADERS))
    if kind.split(";")[0].strip().lower() in ACTIVE_TYPES:
        kind = "text/plain; charset=utf-8"
    return Raw(value, kind, FIELD_HEADERS | {"X-Content-Type-Options": "nosniff"})


def stats(caller: Caller, name: str, version: str, part: str | None) -> Stats:
    """Answer per-field stats and per-class counts of a part."""
    _, view = caller.platform.catalog.open_dataset(caller.project, name, version)
    return Stats.model_validate(view.stats(part))
