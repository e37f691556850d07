"""Processors: each node type's work over streamed Arrow record batches, written to dataset folders.

Per-record parsing and seeded splits go batch by batch in pyarrow. The relational chains
(regex_extract, select, rename, left_join, shuffle, label_id, sql) run as one DuckDB query
each (expressions parsed by the engine, sorts that spill to disk): see fuse.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kpl_dataset import ReadOnlyDataset, WriteOnlyDataset

from . import sql
from .nodes import ANNOTATION_FIELDS, PORT
from .schema import record_type

BATCH_ROWS = 4096
STORED_ROWS = BATCH_ROWS * 16  # a stored batch's rows at most (few, large batches write fastest)
BATCH_BYTES = 16 << 20  # a stored batch's values at most (about): large blobs give batches of few rows
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
    """How processors run: the engine's memory limit, spill folder, threads and time limit per query."""

    memory_limit: str | None = None
    temp_directory: str | None = None
    threads: int = 0  # 0: one per core
    time_limit: float = 0  # seconds a node's query may run (0: no limit)
    arrow_allocator: str = ""  # pyarrow's memory pool in the process that runs nodes ("": its default)


class _Sink:
    """Write batches of one schema into the `root` part of a folder; count rows; honour stop.

    A stored batch ends after STORED_ROWS rows or once its values reach BATCH_BYTES (large blobs:
    few rows), and is copied into fresh buffers, whatever sizes and slices the engine hands
    over: a part's content hash depends on its records only, not on the engine, its thread
    count or the backend.
    """

    def __init__(self, folder: Path, schema: pa.Schema, stop: threading.Event):
        types = {f.name: record_type(f.type) for f in schema}
        self.writer = WriteOnlyDataset(folder, "root", types, nullable=[f.name for f in schema if f.nullable])
        self.schema = self.writer.arrow_schema
        self.stop = stop
        self.rows = 0
        self.pending: deque[pa.RecordBatch] = deque()
        self.pending_rows = 0
        self.pending_bytes = 0  # the values' bytes of every row so far (see _row_bytes)
        self.cut_bytes = BATCH_BYTES  # where the batch being filled is full

    def write(self, batch: pa.RecordBatch) -> None:
        if self.stop.is_set():
            raise Stopped
        if batch.num_rows:
            batch = batch.select(self.schema.names).cast(self.schema)
            self.rows += batch.num_rows
            sizes = np.cumsum(_row_bytes(batch)) + self.pending_bytes
            start = 0
            while start < batch.num_rows:
                # the row where the batch being filled reaches STORED_ROWS rows or BATCH_BYTES
                room = STORED_ROWS - self.pending_rows
                full = int(np.searchsorted(sizes[start:], self.cut_bytes, side="left")) + 1
                take = min(room, full, batch.num_rows - start)
                self.pending.append(batch.slice(start, take))
                self.pending_rows += take
                self.pending_bytes = int(sizes[start + take - 1])
                start += take
                if take in (room, full):
                    self._flush(self.pending_rows)
                    self.cut_bytes = self.pending_bytes + BATCH_BYTES

    def _flush(self, rows: int) -> None:
        pieces = []
        while rows:
            head = self.pending[0]
            if head.num_rows <= rows:
                pieces.append(self.pending.popleft())
            else:
                pieces.append(head.slice(0, rows))
                self.pending[0] = head.slice(rows)
            rows -= pieces[-1].num_rows
            self.pending_rows -= pieces[-1].num_rows
        # fresh, exactly sized buffers: a slice would store bytes that depend on where it was cut from
        columns = [pa.concat_arrays([piece.column(i) for piece in pieces]) for i in range(len(self.schema))]
        self.writer.write_batch(pa.RecordBatch.from_arrays(columns, schema=self.schema))

    def close(self) -> None:
        if self.pending_rows:
            self._flush(self.pending_rows)
        self.writer.close()

    def abort(self) -> None:
        self.writer.abort()


def _row_bytes(batch: pa.RecordBatch) -> np.ndarray:
    """Return each row's size from its values alone (String/ByteArray lengths, 8 for the rest): no layout."""
    sizes = np.full(batch.num_rows, 8 * batch.num_columns, dtype=np.int64)
    for column in batch.columns:
        if pa.types.is_binary(column.type) or pa.types.is_string(column.type):
            lengths = pc.binary_length(column)  # int32 or int64; pc.fill_null(…, 0) would import pandas
            values = np.frombuffer(lengths.buffers()[1], lengths.type.to_pandas_dtype(), len(lengths))
            if lengths.null_count:
                bits = np.frombuffer(lengths.buffers()[0], np.uint8)  # to_numpy() of booleans imports pandas
                valid = np.unpackbits(bits, bitorder="little")[: len(lengths)].astype(bool)
                values = np.where(valid, values, 0)
            sizes += values
    return sizes


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


def write(
    outputs: dict[str, pa.Schema],
    out_dir: Path,
    stop: threading.Event,
    work: Callable[[dict[str, _Sink]], None],
) -> dict[str, int]:
    """Let work fill one sink per output port (out_dir/PORT, part root); close them, or remove them on failure."""
    sinks = _sinks(out_dir, outputs, stop)
    try:
        work(sinks)
        for sink in sinks.values():
            sink.close()
    except BaseException:
        for sink in sinks.values():
            sink.abort()
        raise
    return {port: sink.rows for port, sink in sinks.items()}


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
    return write(
        outputs, out_dir, stop, lambda sinks: PROCESSORS[type_name](params, inputs, sinks, settings, log)
    )


@contextlib.contextmanager
def _engine(settings: Settings, stop: threading.Event | None = None, node: str = "") -> Iterator[Any]:
    """Yield a locked-down DuckDB that spills into a folder of its own (removed after).

    Its query is interrupted when it runs past the time limit (the node fails saying so) or when
    the run is stopped (Stopped): within Watchdog.POLL of the stop, not when the query ends.
    """
    spill = None
    if settings.temp_directory:
        os.makedirs(settings.temp_directory, exist_ok=True)
        spill = tempfile.mkdtemp(prefix="node-", dir=settings.temp_directory)
    con = sql.connect(settings.memory_limit, spill, settings.threads)
    try:
        with sql.Watchdog(con, settings.time_limit, stop) as watch:
            try:
                yield con
            except BaseException:
                if watch.reason == "stopped":
                    raise Stopped from None
                if watch.reason == "time":
                    message = f"the query ran past its time limit of {settings.time_limit:g} s"
                    raise sql.TimeLimit(f"node {node}: {message}" if node else message) from None
                raise
    finally:
        con.close()
        if spill:
            shutil.rmtree(spill, ignore_errors=True)


def regex_query(p) -> str:
    """Return regex_extract's query over table `input` (row by row: any batch of the input gives its rows)."""
    import re

    groups = re.compile(p.pattern).groupindex
    field, pattern = sql.quote(p.field), sql.string(p.pattern)
    columns = ", ".join(
        f"CASE WHEN regexp_matches({field}, {pattern}) THEN regexp_extract({field}, {pattern}, {index}) END AS {sql.quote(name)}"
        for name, index in groups.items()
    )
    return f"SELECT *, {columns} FROM input"


def select_query(p) -> str:
    """Return select's query over table `input` (its where parsed as one expression: see sql.where_query)."""
    return sql.where_query(p.where, "input")


def rename_query(p, names: list[str]) -> str:
    """Return rename's query over table `input` of these fields."""
    columns = ", ".join(f"{sql.quote(n)} AS {sql.quote(p.fields.get(n, n))}" for n in names)
    return f"SELECT {columns} FROM input"


def labels(field: str, values: Any, settings: Settings) -> list:
    """Return the sorted distinct non-null values of field in values (a table or a reader)."""
    with _engine(settings) as con:
        con.register("input", values)
        name = sql.quote(field)
        query = f"SELECT DISTINCT {name} FROM input WHERE {name} IS NOT NULL ORDER BY {name}"
        rows = con.sql(query).fetchall()
    return [r[0] for r in rows]


def log_labels(log: Log, found: list) -> None:
    log(f"{len(found)} labels: {', '.join(map(str, found[:20]))}{' …' if len(found) > 20 else ''}")


def label_column(column: pa.Array, value_set: pa.Array) -> pa.Array:
    """Return each value's index in value_set (null where it is null)."""
    return pc.cast(pc.index_in(column, value_set=value_set), pa.int64())


def parser(type_name: str) -> Callable[[bytes, str], tuple[int, int, list[dict]]]:
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


def annotations(parse: Callable, values: list, rows: Any) -> list[pa.Array]:
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


def parse_annotations(type_name: str):
    parse = parser(type_name)

    def process(p, inputs, sinks, settings, log) -> None:
        start = 0
        for batch in inputs["input"].batches():
            rows = range(start, start + batch.num_rows)
            start += batch.num_rows
            added = annotations(parse, batch.column(p.field).to_pylist(), rows)
            sinks[PORT].write(
                pa.RecordBatch.from_arrays(
                    [*batch.columns, *added], names=[*batch.schema.names, *ANNOTATION_FIELDS]
                )
            )

    return process


_MASK = (1 << 64) - 1


def uniform(seed: int, start: int, count: int) -> np.ndarray:
    """Return count numbers in [0, 1) for rows start.. (SplitMix64 of seed and row: the same on every run)."""
    return uniform_at(seed, np.arange(start, start + count, dtype=np.uint64))


def uniform_at(seed: int, rows: np.ndarray) -> np.ndarray:
    """Return a number in [0, 1) for each row number (as uniform: any batch of rows draws the same)."""
    with np.errstate(over="ignore"):
        z = rows.astype(np.uint64) + np.uint64((seed * 0x9E3779B97F4A7C15) & _MASK)
        z = z * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def split_bounds(p) -> np.ndarray:
    """Return split's cumulative ratios (the last exactly 1)."""
    bounds = np.cumsum(list(p.ratios.values()))
    bounds[-1] = 1.0
    return bounds


def split(p, inputs, sinks, settings, log) -> None:
    bounds = split_bounds(p)
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


PROCESSORS: dict[str, Callable] = {
    "parse_voc": parse_annotations("parse_voc"),
    "parse_labelme": parse_annotations("parse_labelme"),
    "parse_coco": parse_annotations("parse_coco"),
    "split": split,
    "sample": sample,
}
