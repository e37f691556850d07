"""Datasets: versions, pages of records, stats."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from .base import Body
from .catalog import CatalogVersion


class DatasetVersion(CatalogVersion):
    """A dataset version: its parts and record count."""

    record_count: int
    parts: dict[str, int] = Field(description="part -> record count")


class DatasetVersionDetail(DatasetVersion):
    """A dataset version with the record type of each part."""

    schemas: dict[str, Any] = Field(
        description="part -> record_type (kpl-dataset field types: String, Int, Float, ByteArray, "
        "File, Bool, lists and dicts)"
    )


class Dataset(Body):
    """A dataset with its versions, oldest first."""

    name: str
    description: str
    created: datetime | None
    versions: list[DatasetVersion]


class DatasetList(Body):
    """The datasets of a project."""

    datasets: list[Dataset]


class BytesRef(Body):
    """A bytes or File value of a record, replaced by its size, content type and where to fetch it."""

    size: int = Field(alias="$bytes", description="size in bytes")
    contentType: str  # noqa: N815 - the wire name
    url: str = Field(description="path of the field route (relative to the server base URL)")
    thumbnail: str | None = Field(description="URL of a small PNG, for images")


class Record(Body):
    """One record of a page."""

    index: int
    fields: dict[str, Any] = Field(
        description="The record's fields (projected by `columns`); bytes and File values anywhere in "
        "the record are BytesRef objects. Pascal VOC / COCO / labelme `object` lists (name, xmin, "
        "ymin, xmax, ymax, ...) and masks pass through for the UI to draw."
    )


class RecordsPage(Body):
    """A page of records with only the columns asked for."""

    dataset: str = Field(description="NAME:VERSION")
    part: str
    offset: int
    limit: int
    total: int = Field(description="records in the part")
    columns: list[str]
    record_schema: dict[str, Any] = Field(alias="schema", description="record_type of the returned columns")
    records: list[Record]


class FieldStats(Body):
    """Stats of one field."""

    type: str = Field(description="String, Int, Float, Bool, ByteArray, File, list or dict")
    count: int = Field(description="values (list fields: items)")
    min: float | None
    max: float | None
    mean: float | None
    distinct: int | None = Field(description="distinct strings, capped")
    distinct_capped: bool = Field(description="true when there are more distinct strings than counted")
    total_bytes: int | None = Field(description="total size of bytes and File values")


class Stats(Body):
    """Per-field stats and per-class counts of a part."""

    dataset: str
    part: str
    records: int
    fields: dict[str, FieldStats] = Field(description="field path -> stats (nested fields as object.name)")
    class_field: str | None = Field(description="class_name or object.name, whichever the records have")
    classes: dict[str, int] = Field(description="class -> count, most frequent first")
    class_scores: dict[str, list[int]] = Field(
        default_factory=dict,
        description="class -> how many of its predictions score in each 5 % band (21 counts: "
        "[0, 0.05), [0.05, 0.1) … [0.95, 1), 1 and over), for records whose class comes with a "
        "`score`; its count at a minimum score M (a multiple of 0.05) is its count in `classes` "
        "less the first 20·M bands",
    )


class DatasetImport(Body):
    """A dataset import in flight: waiting for an import worker, or importing."""

    id: str
    dataset: str
    format: Literal["import", "imagefolder", "voc", "coco", "labelme"]
    filename: str
    state: Literal["queued", "importing"]
    queued_at: datetime
    started_at: datetime | None
    ahead: int = Field(description="imports of any project queued before this one")


class ImportList(Body):
    """The project's imports in flight, oldest first (an import leaves the list when it ends)."""

    imports: list[DatasetImport]
