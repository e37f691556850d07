"""How processors run: a node's inputs streamed as Arrow record batches, its outputs written to dataset folders.

A `Processor` node type (per-record parsing, seeded splits) goes batch by batch in pyarrow
(its `process`); the relational chains run as one DuckDB query each (expressions parsed by
the engine, sorts that spill to disk): see fuse.py. Both write through these sinks, with the
engine and the seeded draws here.
"""

from __future__ import annotations

import contextlib
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
    node_type: Any,
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
        outputs, out_dir, stop, lambda sinks: node_type.process(params, inputs, sinks, settings, log)
    )


@contextlib.contextmanager
def engine(settings: Settings, stop: threading.Event | None = None, node: str = "") -> Iterator[Any]:
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


def int64_array(values: np.ndarray, missing: np.ndarray | None = None) -> pa.Array:
    """Return an Arrow int64 array over a numpy one, null where missing (pa.array() would import pandas: ~1 s)."""
    values = np.ascontiguousarray(values, dtype=np.int64)
    valid = None if missing is None else pa.py_buffer(np.packbits(~missing, bitorder="little"))
    return pa.Array.from_buffers(pa.int64(), len(values), [valid, pa.py_buffer(values)])


def carry_meta(source: Source, sinks: dict[str, _Sink]) -> None:
    """Give each sink's part the properties (metadata) of the source's part."""
    from kpl_dataset import MetaDB
    from kpl_dataset.fs import resolve

    found = MetaDB(resolve(source.folder), source.part)
    if found.keys():
        for sink in sinks.values():
            sink.writer.get_meta_db().merge_from(found)


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
