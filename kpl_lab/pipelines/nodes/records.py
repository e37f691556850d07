"""Record processors: annotation parsers and seeded splits and samples, batch by batch in pyarrow (or on Ray).

Each runs in a sandboxed worker over its input's record batches (`process`), and block by
block on Ray's workers with the same functions (`on_ray`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
from pydantic import Field

from .. import ray_backend
from ..processors import uniform_at
from ..ray_backend import ROW
from ..schema import PORT, Output
from .base import Params, Processor, Router, dataset_of, find_field, is_new

BOX = pa.struct(
    [
        pa.field(n, pa.string() if n == "name" else pa.int64(), nullable=False)
        for n in ("name", "xmin", "ymin", "xmax", "ymax", "difficult")
    ]
)
OBJECTS = pa.list_(pa.field("item", BOX, nullable=False))
ANNOTATION_FIELDS = {"object": OBJECTS, "width": pa.int64(), "height": pa.int64()}

Parse = Callable[[bytes, str], tuple[int, int, list[dict]]]  # (document, where) -> width, height, objects


class ParseParams(Params):
    input: str
    field: str = Field("content", description="ByteArray or String field holding the annotation")


class ParseAnnotation(Processor):
    params = ParseParams

    def __init__(self, name: str, what: str, parse: Parse):
        self.name = name
        self.parse = parse
        self.description = (
            f"Parse {what} annotations into object (name, xmin, ymin, xmax, ymax, difficult), width, height."
        )

    def check(self, p, inputs, catalog, report):
        schema = dataset_of(inputs, "input", report)
        if schema is None:
            return None
        field = find_field(schema, p.field, "field", "the input", report)
        if field is None:
            return None
        if field.type not in (pa.binary(), pa.string()):
            report("field", f'field "{p.field}" must be a ByteArray or String')
            return None
        if not all(is_new(schema, n, "field", report) for n in ANNOTATION_FIELDS):
            return None
        out = schema
        for n, t in ANNOTATION_FIELDS.items():
            out = out.append(pa.field(n, t, nullable=field.nullable))
        return {PORT: Output("dataset", out)}

    def process(self, p, inputs, sinks, settings, log):
        start = 0
        for batch in inputs["input"].batches():
            rows = range(start, start + batch.num_rows)
            start += batch.num_rows
            added = annotations(self.parse, batch.column(p.field).to_pylist(), rows)
            sinks[PORT].write(
                pa.RecordBatch.from_arrays(
                    [*batch.columns, *added], names=[*batch.schema.names, *ANNOTATION_FIELDS]
                )
            )

    def on_ray(self, p, inputs, sinks, settings, log):
        numbered = ray_backend.dataset(inputs["input"], numbered=True)
        ds = ray_backend.map_blocks(numbered, _parse_block, parse=self.parse, field=p.field)
        ray_backend.drain(ds, sinks[PORT].write)


def annotations(parse: Parse, values: list, rows: Any) -> list[pa.Array]:
    """Return the `object`, `width` and `height` columns of annotation documents (rows: their record numbers)."""
    width, height, objects = [], [], []
    for value, row in zip(values, rows, strict=True):
        if value is None:
            width.append(None), height.append(None), objects.append(None)
        else:
            data = value.encode() if isinstance(value, str) else value
            w, h, o = parse(data, f"record {row}")
            width.append(w), height.append(h), objects.append(o)
    types = list(ANNOTATION_FIELDS.values())
    return [pa.array(v, type=t) for v, t in zip((objects, width, height), types, strict=True)]


def _parse_block(table: pa.Table, parse: Parse, field: str) -> pa.Table:
    added = annotations(parse, table.column(field).to_pylist(), table.column(ROW).to_pylist())
    table = table.drop_columns([ROW])
    for name, column in zip(ANNOTATION_FIELDS, added, strict=True):
        table = table.append_column(name, column)
    return table


def voc(data: bytes, where: str) -> tuple[int, int, list[dict]]:
    """Read a Pascal VOC XML annotation."""
    from kpl_dataset.importers.voc import parse_annotation

    _, width, height, objects = parse_annotation(data, where)
    return width, height, objects


def labelme(data: bytes, where: str) -> tuple[int, int, list[dict]]:
    """Read a labelme JSON document: each shape's points' bounds is a box."""
    doc = json.loads(data)
    objects = []
    for i, shape in enumerate(doc.get("shapes") or []):
        points = shape.get("points") or []
        if not points:
            raise ValueError(f"{where}: shape {i} has no points")
        xs, ys = [pt[0] for pt in points], [pt[1] for pt in points]
        objects.append(
            {
                "name": str(shape.get("label", "")),
                "xmin": round(min(xs)),
                "ymin": round(min(ys)),
                "xmax": round(max(xs)),
                "ymax": round(max(ys)),
                "difficult": int(bool(shape.get("difficult", 0))),
            }
        )
    return int(doc.get("imageWidth") or 0), int(doc.get("imageHeight") or 0), objects


def coco(data: bytes, where: str) -> tuple[int, int, list[dict]]:
    """Read one image's COCO document: images (exactly one), annotations (bbox x, y, w, h), categories."""
    doc = json.loads(data)
    images = doc.get("images") or []
    if len(images) != 1:
        raise ValueError(
            f"{where}: holds {len(images)} images; parse_coco takes one image's COCO document per record"
        )
    names = {c.get("id"): str(c.get("name", "")) for c in doc.get("categories") or []}
    objects = []
    for i, ann in enumerate(doc.get("annotations") or []):
        box = ann.get("bbox") or []
        if len(box) != 4:
            raise ValueError(f"{where}: annotation {i} has no [x, y, width, height] bbox")
        x, y, w, h = box
        objects.append(
            {
                "name": names.get(ann.get("category_id"), str(ann.get("category_id"))),
                "xmin": round(x),
                "ymin": round(y),
                "xmax": round(x + w),
                "ymax": round(y + h),
                "difficult": int(bool(ann.get("iscrowd", 0))),
            }
        )
    return int(images[0].get("width") or 0), int(images[0].get("height") or 0), objects


class SplitParams(Params):
    input: str
    ratios: dict[str, float] = Field(
        min_length=1, description="part name -> fraction; the fractions add up to 1"
    )
    seed: int = 0


class Split(Router):
    name, params = "split", SplitParams
    description = "Split the records into named parts by fraction, the same way for the same seed."

    def check(self, p, inputs, catalog, report):
        schema = dataset_of(inputs, "input", report)
        bad = [k for k, v in p.ratios.items() if not (0 < v <= 1)]
        if bad:
            report("ratios", f"fractions must be in (0, 1]: {', '.join(bad)}")
            return None
        if not math.isclose(sum(p.ratios.values()), 1.0, abs_tol=1e-9):
            report("ratios", f"fractions add up to {sum(p.ratios.values()):g}, not 1")
            return None
        if any(not re.match(r"^[A-Za-z0-9_][A-Za-z0-9_-]*$", k) for k in p.ratios):
            report("ratios", "part names are letters, digits, _ and -")
            return None
        if schema is None:
            return None
        return {k: Output("dataset", schema) for k in p.ratios}

    def route(self, p, rows):
        bounds = np.cumsum(list(p.ratios.values()))
        bounds[-1] = 1.0  # every draw lands in a part
        return np.searchsorted(bounds, uniform_at(p.seed, rows), side="right")


class SampleParams(Params):
    input: str
    fraction: float = Field(gt=0, le=1, description="share of the records kept")
    seed: int = 0


class Sample(Router):
    name, params = "sample", SampleParams
    description = "Keep a random share of the records (the same ones for the same seed)."

    def check(self, p, inputs, catalog, report):
        schema = dataset_of(inputs, "input", report)
        return None if schema is None else {PORT: Output("dataset", schema)}

    def route(self, p, rows):
        return np.where(uniform_at(p.seed, rows) < p.fraction, 0, -1)
