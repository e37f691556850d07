"""Processors: each node type's work over streamed Arrow record batches, written to dataset folders.

Per-record parsing and seeded splits go batch by batch in pyarrow; `shuffle` and `sql` go to
DuckDB (expressions parsed by the engine, sorts that spill to disk). The relational chains
(regex_extract, select, rename, left_join, label_id) run as one query each: see fuse.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from kpl_dataset import ReadOnlyDataset, WriteOnlyDataset

from . import sql
from .nodes import ANNOTATION_FIELDS, PORT
from .schema import record_type

BATCH_ROWS = 4096
Log = Callable[[str], None]


class Stopped(Exception):
    """The run was asked to stop."""


@dataclass
class Source:
    """One input of a node: a dataset part in a folder and its schema."""

    folder: Path
    part: str
    schema: pa.Schema
    rows: int | None = None

    def batches(self) -> Iterator[pa.RecordBatch]:
        reader = ReadOnlyDataset(self.folder, self.part)
        for batch in reader.iter_batches(BATCH_ROWS):
            yield batch.cast(self.schema)  # stored nullability is the schema's own


@dataclass
class Settings:
    """How processors run: the engine's memory limit and spill folder."""

    memory_limit: str | None = None
    temp_directory: str | None = None


class _Sink:
    """Write batches of one schema into the `root` part of a folder; count rows; honour stop."""

    def __init__(self, folder: Path, schema: pa.Schema, stop: threading.Event):
        types = {f.name: record_type(f.type) for f in schema}
        self.writer = WriteOnlyDataset(folder, "root", types, nullable=[f.name for f in schema if f.nullable])
        self.schema = self.writer.arrow_schema
        self.stop = stop
        self.rows = 0

    def write(self, batch: pa.RecordBatch) -> None:
        if self.stop.is_set():
            raise Stopped
        if batch.num_rows:
            self.writer.write_batch(batch.select(self.schema.names))
            self.rows += batch.num_rows

    def drain(self, reader: pa.RecordBatchReader) -> None:
        for batch in reader:
            self.write(batch)

    def close(self) -> None:
        self.writer.close()

    def abort(self) -> None:
        self.writer.abort()


def _sinks(out_dir: Path, outputs: dict[str, pa.Schema], stop: threading.Event) -> dict[str, _Sink]:
    sinks: dict[str, _Sink] = {}
    try:
        for port, schema in outputs.items():
            sinks[port] = _Sink(out_dir / port, schema, stop)
    except BaseException:
        for sink in sinks.values():
            sink.abort()
        raise
    return sinks


def run(
    type_name: str,
    params: Any,
    inputs: dict[str, Source],
    outputs: dict[str, pa.Schema],
    out_dir: Path,
    stop: threading.Event,
    log: Log,
    settings: Settings | None = None,
) -> dict[str, int]:
    """Run one processor node; write each output port to out_dir/PORT (part root); return rows per port."""
    settings = settings or Settings()
    sinks = _sinks(out_dir, outputs, stop)
    try:
        PROCESSORS[type_name](params, inputs, sinks, settings, log)
        for sink in sinks.values():
            sink.close()
    except BaseException:
        for sink in sinks.values():
            sink.abort()
        raise
    return {port: sink.rows for port, sink in sinks.items()}


@contextlib.contextmanager
def _engine(settings: Settings) -> Iterator[Any]:
    """Yield a locked-down DuckDB that spills into a folder of its own (removed after)."""
    spill = None
    if settings.temp_directory:
        os.makedirs(settings.temp_directory, exist_ok=True)
        spill = tempfile.mkdtemp(prefix="node-", dir=settings.temp_directory)
    con = sql.connect(settings.memory_limit, spill)
    try:
        yield con
    finally:
        con.close()
        if spill:
            shutil.rmtree(spill, ignore_errors=True)


def _query(settings: Settings, tables: dict[str, pa.RecordBatchReader], query: str, sink: _Sink) -> None:
    with _engine(settings) as con:
        for name, reader in tables.items():
            con.register(name, reader)
        sink.drain(con.sql(query).to_arrow_reader(BATCH_ROWS))


def _stream(source: Source, numbered: bool = False) -> pa.RecordBatchReader:
    return sql.stream(source.schema, source.batches(), numbered)


def _string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _parser(type_name: str) -> Callable[[bytes, str], tuple[int, int, list[dict]]]:
    if type_name == "parse_voc":
        from kpl_dataset.importers.voc import parse_annotation

        def voc(data: bytes, where: str) -> tuple[int, int, list[dict]]:
            _, width, height, objects = parse_annotation(data, where)
            return width, height, objects

        return voc
    return _coco if type_name == "parse_coco" else _labelme


def _coco(data: bytes, where: str) -> tuple[int, int, list[dict]]:
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


def _labelme(data: bytes, where: str) -> tuple[int, int, list[dict]]:
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


def parse_annotations(type_name: str):
    parse = _parser(type_name)

    def process(p, inputs, sinks, settings, log) -> None:
        row = 0
        types = list(ANNOTATION_FIELDS.values())
        for batch in inputs["input"].batches():
            width, height, objects = [], [], []
            for value in batch.column(p.field).to_pylist():
                if value is None:
                    width.append(None), height.append(None), objects.append(None)
                else:
                    data = value.encode() if isinstance(value, str) else value
                    w, h, o = parse(data, f"record {row}")
                    width.append(w), height.append(h), objects.append(o)
                row += 1
            added = [pa.array(v, type=t) for v, t in zip((objects, width, height), types, strict=True)]
            sinks[PORT].write(
                pa.RecordBatch.from_arrays(
                    [*batch.columns, *added], names=[*batch.schema.names, *ANNOTATION_FIELDS]
                )
            )

    return process


_MASK = (1 << 64) - 1


def uniform(seed: int, start: int, count: int) -> np.ndarray:
    """Return count numbers in [0, 1) for rows start.. (SplitMix64 of seed and row: the same on every run)."""
    with np.errstate(over="ignore"):
        z = np.arange(start, start + count, dtype=np.uint64) + np.uint64((seed * 0x9E3779B97F4A7C15) & _MASK)
        z = z * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def split(p, inputs, sinks, settings, log) -> None:
    bounds = np.cumsum(list(p.ratios.values()))
    bounds[-1] = 1.0
    start = 0
    for batch in inputs["input"].batches():
        which = np.searchsorted(bounds, uniform(p.seed, start, batch.num_rows), side="right")
        start += batch.num_rows
        for i, port in enumerate(p.ratios):
            sinks[port].write(batch.filter(pa.array(which == i)))


def sample(p, inputs, sinks, settings, log) -> None:
    start = 0
    for batch in inputs["input"].batches():
        keep = uniform(p.seed, start, batch.num_rows) < p.fraction
        start += batch.num_rows
        sinks[PORT].write(batch.filter(pa.array(keep)))


def shuffle(p, inputs, sinks, settings, log) -> None:
    source = inputs["input"]
    out = source.schema.append(pa.field("__kpl_key", pa.float64()))

    def keyed() -> Iterator[pa.RecordBatch]:
        start = 0
        for batch in source.batches():
            key = pa.array(uniform(p.seed, start, batch.num_rows))
            start += batch.num_rows
            yield pa.RecordBatch.from_arrays([*batch.columns, key], schema=out)

    reader = pa.RecordBatchReader.from_batches(out, keyed())
    _query(
        settings, {"input": reader}, "SELECT * EXCLUDE (__kpl_key) FROM input ORDER BY __kpl_key", sinks[PORT]
    )


def sql_query(p, inputs, sinks, settings, log) -> None:
    tables = {name: _stream(inputs[f"inputs.{name}"]) for name in p.inputs}
    _query(settings, tables, p.query, sinks[PORT])


PROCESSORS: dict[str, Callable] = {
    "parse_voc": parse_annotations("parse_voc"),
    "parse_labelme": parse_annotations("parse_labelme"),
    "parse_coco": parse_annotations("parse_coco"),
    "split": split,
    "sample": sample,
    "shuffle": shuffle,
    "sql": sql_query,
}
