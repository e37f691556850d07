"""The Ray Data backend: processors' per-batch work as Ray Data operations, output written on the driver.

The driver streams each input into Ray's object store block by block (numbered, so seeded draws
and error messages see the same row numbers as locally), workers run the same Arrow batch
functions the local backend uses, and the driver writes the ordered result through the same
sinks: the datasets, their content hashes and catalog versions equal the local backend's.
A node type's Ray form is its `on_ray` (kpl_lab/pipelines/nodes); these are the means it uses.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import BadRequest
from . import processors, sql
from .processors import Log, Settings, Source
from .schema import PORT

ROW = sql.ROW
PART = "__kpl_part"  # the part (of a split) or hash partition (of a join) a record goes to
PARTS_PER_CPU = 1  # a join's hash partitions per core (the benchmarks were measured with 1)
RETRY_NOTE = "\nFailed to apply UDF transform"  # what Ray Data appends to a map's error

_lock = threading.Lock()
_turn = threading.Lock()  # one Ray Data execution at a time per process: each gets the whole cluster
_local = threading.local()


def connect(address: str | None = None) -> None:
    """Join the Ray cluster at address (else RAY_ADDRESS, else a local Ray started here) unless joined."""
    try:
        import ray
        import ray.data
    except ImportError:
        raise BadRequest(
            "backend: 'ray' needs Ray Data installed: pip install 'kpl-lab[ray]'", field="backend"
        ) from None
    with _lock:
        if not ray.is_initialized():
            ray.init(address=address or None, include_dashboard=False, log_to_driver=False)
        context = ray.data.DataContext.get_current()
        context.execution_options.preserve_order = True  # blocks come back in input order
        context.raise_original_map_exception = True  # a bad record's own error, not "UDF failed"
        # joins shuffle with tasks, not hash-shuffle actors (100k benchmark, 2 cores: 7.9 s, not 26.9 s)
        context.shuffle_strategy = ray.data.context.ShuffleStrategy.SORT_SHUFFLE_PULL_BASED


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
    """Run one node on Ray (or on the driver where it has no Ray form); return rows per port."""
    settings = settings or Settings()
    if node_type.on_ray is None:
        log(f"ray: {node_type.name} runs in DuckDB on the driver (it has no Ray Data form)")
        return processors.run(node_type, params, inputs, outputs, out_dir, stop, log, settings)
    connect()
    log(f"ray: {node_type.name} runs as Ray Data operations")
    try:
        return processors.write(
            outputs, out_dir, stop, lambda sinks: node_type.on_ray(params, inputs, sinks, settings, log)
        )
    except Exception as err:
        raise _cause(err) from None


def _cause(err: BaseException) -> BaseException:
    """Return the processor's own error inside Ray's task wrapper, without Ray's retry advice."""
    seen = {id(err)}
    while isinstance(getattr(err, "cause", None), BaseException) and id(err.cause) not in seen:
        err = err.cause
        seen.add(id(err))
    if err.args and isinstance(err.args[0], str) and RETRY_NOTE in err.args[0]:
        err.args = (err.args[0].split(RETRY_NOTE)[0], *err.args[1:])
    return err


def put_blocks(source: Source, numbered: bool = False) -> list:
    """Put the source's batches into the object store one by one; return their references (none if empty)."""
    import ray

    return [
        ray.put(pa.Table.from_batches([b])) for b in sql.stream(source.schema, source.batches(), numbered)
    ]


def dataset(source: Source, numbered: bool = False, refs: list | None = None):
    """Return a Ray dataset of the source's batches (or of refs, their references already put)."""
    import ray
    import ray.data

    refs = put_blocks(source, numbered) if refs is None else refs
    if not refs:
        schema = (
            source.schema.append(pa.field(ROW, pa.int64(), nullable=False)) if numbered else source.schema
        )
        refs = [ray.put(schema.empty_table())]
    return ray.data.from_arrow_refs(refs)


def map_blocks(ds, fn, **kwargs):
    """Return ds with fn(block, **kwargs) applied to each block (a pyarrow Table) by Ray's workers."""
    return ds.map_batches(fn, batch_format="pyarrow", batch_size=None, zero_copy_batch=True, fn_kwargs=kwargs)


def drain(ds, write) -> None:
    """Hand the dataset's blocks, in order, to write (on the driver)."""
    for table in ds.iter_batches(batch_size=None, batch_format="pyarrow", prefetch_batches=2):
        for batch in table.to_batches():
            write(batch)


# functions run by Ray workers: one block (a pyarrow Table) in, one out


def engine():
    """Return this worker thread's locked-down engine connection."""
    con = getattr(_local, "con", None)
    if con is None:  # one locked-down connection per worker thread (opening one costs ~40 ms)
        con = _local.con = sql.connect()
    return con


def _query_block(table: pa.Table, query: str) -> pa.Table:
    con = engine()
    con.register("input", table)
    try:
        return con.sql(query).to_arrow_table()
    finally:
        con.unregister("input")


def draws(table: pa.Table, seed: int) -> np.ndarray:
    """Return each numbered record's seeded draw (as processors.uniform: the same as locally)."""
    return processors.uniform_at(seed, table.column(ROW).to_numpy())


def row_query(query: str, inputs: dict[str, Source], sinks: dict) -> None:
    """Run a row-by-row query over table `input` block by block; write its records (in order)."""
    drain(map_blocks(dataset(inputs["input"]), _query_block, query=query), sinks[PORT].write)
