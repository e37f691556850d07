"""Pages, single fields, thumbnails and stats of stored dataset versions, for the REST API and the UI.

A version is immutable, so its thumbnails and stats are computed once and cached in a
folder of the storage root keyed by the version. A page reads only the fields asked for,
and replaces each bytes or File value by its size, content type and the URL that serves it.
"""

from __future__ import annotations

import hashlib
import io
import json
import mimetypes
import os
import threading
import uuid
import warnings
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

import kpl_dataset
from kpl_dataset import KPLDatasetError, ReadOnlyDataset

from ..errors import BadRequest, KPLError, NotFound
from .datasets import THUMBNAIL_MAX, THUMBNAIL_MIN, part_order

STRING_DISTINCT_CAP = 1000  # distinct strings counted per field before saying "capped"
CLASS_CAP = 100_000  # distinct classes kept while counting
# per-class score counts in 5 % bands, the steps of the viewer's minimum-score slider: [0, 0.05) … [0.95, 1), 1
SCORE_BANDS = 21
STATS_FORMAT = 2  # in the cached file's name: stats of an older format are computed again
READER_CACHE = 32  # open readers kept (manifests parsed, shards mapped)
_PLAIN_MODES = {"1", "L", "LA", "P", "RGB", "RGBA"}

# (bytes prefix, offset, content type) of the formats a browser can show
_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", 0, "image/png"),
    (b"\xff\xd8\xff", 0, "image/jpeg"),
    (b"GIF8", 0, "image/gif"),
    (b"BM", 0, "image/bmp"),
    (b"WEBP", 8, "image/webp"),
    (b"II*\x00", 0, "image/tiff"),
    (b"MM\x00*", 0, "image/tiff"),
    (b"%PDF", 0, "application/pdf"),
)

_readers: OrderedDict[tuple, ReadOnlyDataset] = OrderedDict()
_readers_lock = threading.Lock()


def sniff(data: bytes) -> str:
    """Return the content type of bytes from their first bytes."""
    for magic, offset, kind in _MAGIC:
        if data[offset : offset + len(magic)] == magic:
            return kind
    head = data[:512]
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as error:
        if error.start < len(head) - 3:  # not just a character cut at the end of the sample
            return "application/octet-stream"
        text = head[: error.start].decode("utf-8")
    stripped = text.lstrip()
    if stripped.startswith("<"):
        return "application/xml"
    if stripped.startswith(("{", "[")):
        return "application/json"
    if all(ch.isprintable() or ch in "\r\n\t" for ch in text):
        return "text/plain"
    return "application/octet-stream"


def open_reader(folder: Path, part: str, columns: tuple[str, ...] | None) -> ReadOnlyDataset:
    """Return a shared reader of one part (versions never change, so readers are reused)."""
    key = (str(folder), part, columns)
    with _readers_lock:
        reader = _readers.get(key)
        if reader is not None:
            _readers.move_to_end(key)
            return reader
    try:
        reader = ReadOnlyDataset(str(folder), part, columns=list(columns) if columns is not None else None)
    except KPLDatasetError as error:
        raise BadRequest(str(error), field="columns" if columns else "part") from None
    with _readers_lock:
        _readers[key] = reader
        while len(_readers) > READER_CACHE:
            _readers.popitem(last=False)
    return reader


def forget(folder: Path) -> None:
    """Drop the shared readers of a deleted version."""
    with _readers_lock:
        for key in [k for k in _readers if k[0] == str(folder)]:
            del _readers[key]


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def thumbnail_key(part: str, index: int, path_text: str, size: int) -> str:
    """Return the cache file name of a thumbnail: a hash, so no request text ever names a path."""
    key = json.dumps([part, index, path_text, size])  # ensure_ascii: NULs and lone surrogates too
    return hashlib.sha256(key.encode("ascii")).hexdigest()


def parse_field_path(text: str) -> list[str | int]:
    """Split `object.0.mask` into ["object", 0, "mask"]."""
    # ASCII digits only (int("²") raises), and no more than any list holds (int() of 5000 digits raises)
    parts: list[str | int] = [
        int(p) if p.isascii() and p.isdigit() and len(p) <= 18 else p for p in text.split(".")
    ]
    if not text or "" in parts or not isinstance(parts[0], str):
        raise BadRequest(
            f"field {text!r}: expected a field name, or a path such as object.0.mask", field="field"
        )
    return parts


def thumbnail_png(data: bytes, size: int, shown_as: str) -> bytes:
    """Return a PNG of an image at most `size` pixels on its longer side (decoded in a sandboxed worker)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as image:
                image.draft("RGB", (size, size))  # JPEG: decode at a reduced scale
                image.thumbnail((size, size))
                if image.mode not in _PLAIN_MODES:
                    image = image.convert("RGBA" if "A" in image.getbands() else "RGB")
                out = io.BytesIO()
                image.save(out, format="PNG")
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombWarning) as error:
        raise BadRequest(f"{shown_as}: cannot read the image ({error})", field="thumbnail") from None
    return out.getvalue()


class DatasetView:
    """Read one stored dataset version a page, a field, a thumbnail or a summary at a time."""

    def __init__(self, folder: Path, cache_dir: Path, ref: str = "", draw: Callable | None = None) -> None:
        self.folder = Path(folder)
        self.cache_dir = Path(cache_dir)
        self.ref = ref
        # draw(image bytes, size, shown as) -> PNG: in the project's sandbox (catalog.datasets.open_view)
        self.draw = draw or thumbnail_png

    def parts(self) -> list[str]:
        """Return the part names in reading order (root, train, validation, test, the others)."""
        return part_order(kpl_dataset.list_parts(str(self.folder)))

    def part(self, name: str | None) -> str:
        """Return the part asked for: by default the first in reading order (`train` before `test`)."""
        parts = self.parts()
        if name is None or name == "":
            return parts[0]
        if name not in parts:
            raise NotFound(f"dataset {self.ref}: no part {name!r} (parts: {', '.join(parts)})")
        return name

    def schemas(self) -> dict[str, dict]:
        """Return each part's record_type."""
        return {part: open_reader(self.folder, part, None).schema for part in self.parts()}

    # pages

    def page(
        self,
        part: str | None,
        offset: int,
        limit: int,
        columns: list[str] | None,
        field_url: Callable[[str, int, str], str],
    ) -> dict:
        """Return records [offset, offset+limit) with only `columns`; bytes become references."""
        part = self.part(part)
        full = open_reader(self.folder, part, None).schema
        if columns:
            missing = [c for c in columns if c not in full]
            if missing:
                raise BadRequest(
                    f"columns: {', '.join(missing)} not in part {part!r} (fields: {', '.join(full)})",
                    field="columns",
                )
        names = tuple(dict.fromkeys(columns)) if columns else tuple(full)
        reader = open_reader(self.folder, part, names)
        total = len(reader)
        records = []
        for index in range(min(offset, total), min(offset + limit, total)):
            try:
                record = reader[index]
            except KPLDatasetError as error:
                raise KPLError(f"dataset {self.ref}: {error}") from None
            fields = _references(record, reader.schema, [], lambda path, i=index: field_url(part, i, path))
            records.append({"index": index, "fields": fields})
        return {
            "dataset": self.ref,
            "part": part,
            "offset": offset,
            "limit": limit,
            "total": total,
            "columns": list(names),
            "schema": reader.schema,
            "records": records,
        }

    # one field

    def field(self, part: str | None, index: int, path_text: str) -> tuple[Any, str | None]:
        """Return (bytes, content type) of a bytes or File value, or (value, None) of any other value."""
        part = self.part(part)
        path = parse_field_path(path_text)
        full = open_reader(self.folder, part, None).schema
        if path[0] not in full:
            raise NotFound(f"dataset {self.ref}: no field {path[0]!r} (fields: {', '.join(full)})")
        columns = (path[0], "contentType") if path == ["content"] and "contentType" in full else (path[0],)
        reader = open_reader(self.folder, part, columns)
        if not 0 <= index < len(reader):
            raise NotFound(
                f"dataset {self.ref}: record {index} not found (part {part!r} has {len(reader)} records)"
            )
        try:
            record = reader[index]
        except KPLDatasetError as error:
            raise KPLError(f"dataset {self.ref}: {error}") from None
        parent: Any = None
        value: Any = record
        rtype: Any = reader.schema
        for step in path:
            parent = value
            try:
                value, rtype = value[step], (rtype[step] if isinstance(rtype, dict) else rtype[0])
            except (KeyError, IndexError, TypeError):
                raise NotFound(f"dataset {self.ref}: record {index} has no field {path_text!r}") from None
        if rtype == "ByteArray":
            return value, _content_type(parent, path[-1], value)
        if rtype == "File":
            try:
                data = reader.read_file(value)
            except KPLDatasetError as error:
                raise KPLError(f"dataset {self.ref}: {error}") from None
            return data, _file_type(value, data)
        return value, None

    def thumbnail(self, part: str | None, index: int, path_text: str, size: int) -> bytes:
        """Return a PNG of an image field at most `size` pixels on its longer side (cached)."""
        if not THUMBNAIL_MIN <= size <= THUMBNAIL_MAX:
            raise BadRequest(
                f"thumbnail: must be between {THUMBNAIL_MIN} and {THUMBNAIL_MAX} pixels, got {size}",
                field="thumbnail",
            )
        part = self.part(part)
        parse_field_path(path_text)
        cached = self.cache_dir / "thumbnails" / f"{thumbnail_key(part, index, path_text, size)}.png"
        if cached.is_file():
            return cached.read_bytes()
        data, kind = self.field(part, index, path_text)
        if kind is None or not kind.startswith("image/"):
            raise BadRequest(
                f"field {path_text!r} of record {index} is not an image ({kind or 'not bytes'})",
                field="thumbnail",
            )
        png = self.draw(data, size, f"field {path_text!r} of record {index}")
        _atomic_write(cached, png)
        return png

    # stats

    def stats(self, part: str | None) -> dict:
        """Return per-field stats and per-class counts of a part (computed once, then cached)."""
        part = self.part(part)
        cached = self.cache_dir / f"stats.{STATS_FORMAT}.{part}.json"
        if cached.is_file():
            return json.loads(cached.read_bytes())
        schema = open_reader(self.folder, part, None).schema
        # naming every column is a projection: blobs are never checksummed, only their offsets read
        reader = open_reader(self.folder, part, tuple(schema))
        fields: dict[str, dict] = {}
        classes: dict[str, int] = {}
        class_scores: dict[str, list[int]] = {}
        class_field = _class_field(schema)
        scored = class_field is not None and _scored(schema, class_field)
        try:
            for batch in reader.iter_batches():
                for name, column in zip(batch.schema.names, batch.columns, strict=True):
                    _accumulate(fields, name, column, schema[name])
                if class_field is not None:
                    _count_classes(classes, batch, class_field)
                if scored:
                    _count_scores(class_scores, batch, class_field)
        except KPLDatasetError as error:
            raise KPLError(f"dataset {self.ref}: {error}") from None
        result = {
            "dataset": self.ref,
            "part": part,
            "records": len(reader),
            "fields": {path: _finish(acc) for path, acc in fields.items()},
            "class_field": class_field,
            "classes": dict(sorted(classes.items(), key=lambda item: (-item[1], item[0]))),
            "class_scores": {name: bands for name, bands in class_scores.items() if name in classes},
        }
        _atomic_write(cached, json.dumps(result).encode())
        return result


def _content_type(parent: Any, key: Any, data: bytes) -> str:
    """Return the content type a record gives its bytes (a sibling contentType), else sniff it."""
    if isinstance(parent, dict):
        for sibling in ("contentType", f"{key}_contentType", f"{key}ContentType"):
            given = parent.get(sibling) if sibling != "contentType" or key == "content" else None
            if isinstance(given, str) and given:
                return given
    return sniff(data)


def _file_type(value: dict, head: bytes) -> str:
    """Return the content type of a File value from its path, else from its first bytes."""
    guessed = mimetypes.guess_type(value.get("file_path") or "")[0]
    return guessed or sniff(head)


def _references(value: Any, rtype: Any, path: list, url: Callable[[str], str], parent: Any = None) -> Any:
    """Return a record (or part of one) with bytes and File values replaced by references."""
    if rtype in ("ByteArray", "File"):
        if rtype == "File":
            size, kind = int(value.get("size") or 0), _file_type(value, value.get("content") or b"")
        else:
            size, kind = len(value), _content_type(parent, path[-1], value)
        text = ".".join(str(p) for p in path)
        ref = {"$bytes": size, "contentType": kind, "url": url(text), "thumbnail": None}
        if kind.startswith("image/"):
            ref["thumbnail"] = url(text) + "&thumbnail=128"
        return ref
    if isinstance(rtype, list) and isinstance(value, list):
        return [_references(item, rtype[0], [*path, i], url) for i, item in enumerate(value)]
    if isinstance(rtype, dict) and isinstance(value, dict):
        return {k: _references(v, rtype.get(k), [*path, k], url, value) for k, v in value.items()}
    return value


def _class_field(schema: dict) -> str | None:
    if schema.get("class_name") == "String":
        return "class_name"
    objects = schema.get("object")
    if isinstance(objects, list) and isinstance(objects[0], dict) and objects[0].get("name") == "String":
        return "object.name"
    return None


def _scored(schema: dict, class_field: str) -> bool:
    """Say whether the class field comes with a `score` beside it (predictions)."""
    holder = schema if class_field == "class_name" else schema["object"][0]
    return holder.get("score") == "Float"


def _classes_and(
    batch: pa.RecordBatch, class_field: str, field: str | None = None
) -> tuple[pa.Array, pa.Array | None]:
    """Return the class of every record (class_name) or object (object.name), and the sibling `field` of each."""
    if class_field == "class_name":
        return batch.column("class_name"), batch.column(field) if field else None
    objects = pc.list_flatten(batch.column("object"))
    return pc.struct_field(objects, "name"), pc.struct_field(objects, field) if field else None


def _count_scores(class_scores: dict[str, list[int]], batch: pa.RecordBatch, class_field: str) -> None:
    """Count each class's scores by 5 % band (SCORE_BANDS), the steps of the viewer's minimum-score slider."""
    names, scores = _classes_and(batch, class_field, "score")
    # in float64, as the viewer compares a box's score with the slider's minimum; no score: no band
    banded = pc.floor(pc.multiply(pc.cast(scores, pa.float64()), SCORE_BANDS - 1))
    bands = pc.min_element_wise(
        pc.max_element_wise(banded, 0, skip_nulls=False), SCORE_BANDS - 1, skip_nulls=False
    )
    table = pa.table({"name": names, "band": pc.cast(bands, pa.int64())}).drop_null()
    for row in table.group_by(["name", "band"]).aggregate([("band", "count")]).to_pylist():
        counts = class_scores.setdefault(row["name"], [0] * SCORE_BANDS)
        counts[row["band"]] += row["band_count"]


def _count_classes(classes: dict[str, int], batch: pa.RecordBatch, class_field: str) -> None:
    values, _ = _classes_and(batch, class_field)
    for item in pc.value_counts(values).to_pylist():
        name = item["values"]
        if name in classes or len(classes) < CLASS_CAP:
            classes[name] = classes.get(name, 0) + item["counts"]


def _accumulate(fields: dict[str, dict], path: str, column: pa.Array, rtype: Any) -> None:
    """Add one column of one batch to the running stats of `path` (and of its nested fields)."""
    kind = rtype if isinstance(rtype, str) else ("list" if isinstance(rtype, list) else "dict")
    acc = fields.setdefault(
        path,
        {
            "type": kind,
            "count": 0,
            "min": None,
            "max": None,
            "sum": 0.0,
            "distinct": set(),
            "capped": False,
            "total_bytes": None,
        },
    )
    acc["count"] += len(column)
    numbers = None
    if kind in ("Int", "Float", "Bool"):
        numbers = column
    elif kind == "list":
        numbers = pc.list_value_length(column)
        item, flat = rtype[0], pc.list_flatten(column)
        if isinstance(item, dict):  # object.name, object.xmin, ...
            for key, sub in item.items():
                _accumulate(fields, f"{path}.{key}", pc.struct_field(flat, key), sub)
        else:
            _accumulate(fields, f"{path}[]", flat, item)
    elif kind == "dict":
        for key, sub in rtype.items():
            _accumulate(fields, f"{path}.{key}", pc.struct_field(column, key), sub)
    elif kind == "String":
        if not acc["capped"]:
            acc["distinct"].update(pc.unique(column).to_pylist())
            if len(acc["distinct"]) > STRING_DISTINCT_CAP:
                acc["capped"] = True
                acc["distinct"] = set(list(acc["distinct"])[:STRING_DISTINCT_CAP])
    elif kind == "ByteArray":
        acc["total_bytes"] = (acc["total_bytes"] or 0) + int(pc.sum(pc.binary_length(column)).as_py() or 0)
    elif kind == "File":
        acc["total_bytes"] = (acc["total_bytes"] or 0) + int(
            pc.sum(pc.struct_field(column, "size")).as_py() or 0
        )
    if numbers is not None and len(numbers):
        if kind == "Bool":
            numbers = pc.cast(numbers, pa.int64())
        low, high = pc.min_max(numbers).values()
        low, high = low.as_py(), high.as_py()
        acc["min"] = low if acc["min"] is None else min(acc["min"], low)
        acc["max"] = high if acc["max"] is None else max(acc["max"], high)
        acc["sum"] += float(pc.sum(numbers).as_py() or 0)


def _finish(acc: dict) -> dict:
    numeric = acc["min"] is not None
    return {
        "type": acc["type"],
        "count": acc["count"],
        "min": acc["min"],
        "max": acc["max"],
        "mean": acc["sum"] / acc["count"] if numeric and acc["count"] else None,
        "distinct": len(acc["distinct"]) if acc["type"] == "String" else None,
        "distinct_capped": acc["capped"],
        "total_bytes": acc["total_bytes"],
    }
