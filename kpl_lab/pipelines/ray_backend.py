"""The Ray Data backend: processors' per-batch work as Ray Data operations, output written on the driver.

The driver streams each input into Ray's object store block by block (numbered, so seeded draws
and error messages see the same row numbers as locally), workers run the same Arrow batch
functions the local backend uses, and the driver writes the ordered result through the same
sinks: the datasets, their content hashes and catalog versions equal the local backend's.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import BadRequest
from . import processors, sql
from .nodes import ANNOTATION_FIELDS, PORT
from .processors import Log, Settings, Source

ROW = sql.ROW
PART = "__kpl_part"
KEY = "__kpl_key"
RIGHT_ROW = "__kpl_right_row"
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
    type_name: str,
    params: Any,
    inputs: dict[str, Source],
    outputs: dict[str, pa.Schema],
    out_dir: Path,
    stop: threading.Event,
    log: Log,
    settings: Settings | None = None,
) -> dict[str, int]:
    """Run one processor node on Ray (or on the driver where it has no Ray form); return rows per port."""
    settings = settings or Settings()
    work = ON_RAY.get(type_name)
    if work is None:
        log(f"ray: {type_name} runs in DuckDB on the driver (it has no Ray Data form)")
        return processors.run(type_name, params, inputs, outputs, out_dir, stop, log, settings)
    connect()
    log(f"ray: {type_name} runs as Ray Data operations")
    try:
        return processors.write(
            outputs, out_dir, stop, lambda sinks: work(params, inputs, sinks, settings, log)
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


def _refs(source: Source, numbered: bool = False) -> list:
    """Put the source's batches into the object store one by one; return their references (none if empty)."""
    import ray

    return [
        ray.put(pa.Table.from_batches([b])) for b in sql.stream(source.schema, source.batches(), numbered)
    ]


def _dataset(source: Source, numbered: bool = False, refs: list | None = None):
    """Return a Ray dataset of the source's batches (or of refs, their references already put)."""
    import ray
    import ray.data

    refs = _refs(source, numbered) if refs is None else refs
    if not refs:
        schema = (
            source.schema.append(pa.field(ROW, pa.int64(), nullable=False)) if numbered else source.schema
        )
        refs = [ray.put(schema.empty_table())]
    return ray.data.from_arrow_refs(refs)


def _map(ds, fn, **kwargs):
    return ds.map_batches(fn, batch_format="pyarrow", batch_size=None, zero_copy_batch=True, fn_kwargs=kwargs)


def _drain(ds, write) -> None:
    """Hand the dataset's blocks, in order, to write (on the driver)."""
    for table in ds.iter_batches(batch_size=None, batch_format="pyarrow", prefetch_batches=2):
        for batch in table.to_batches():
            write(batch)


# functions run by Ray workers: one block (a pyarrow Table) in, one out


def _engine():
    con = getattr(_local, "con", None)
    if con is None:  # one locked-down connection per worker thread (opening one costs ~40 ms)
        con = _local.con = sql.connect()
    return con


def _query_block(table: pa.Table, query: str) -> pa.Table:
    con = _engine()
    con.register("input", table)
    try:
        return con.sql(query).to_arrow_table()
    finally:
        con.unregister("input")


def _label_values(table: pa.Table, field: str) -> pa.Table:
    return pa.table({field: pc.unique(table.column(field).combine_chunks())})


def _label_block(table: pa.Table, field: str, output: str, value_set: pa.Array) -> pa.Table:
    return table.append_column(
        output, processors.label_column(table.column(field).combine_chunks(), value_set)
    )


def _parse_block(table: pa.Table, type_name: str, field: str) -> pa.Table:
    rows = table.column(ROW).to_pylist()
    added = processors.annotations(processors.parser(type_name), table.column(field).to_pylist(), rows)
    table = table.drop_columns([ROW])
    for name, column in zip(ANNOTATION_FIELDS, added, strict=True):
        table = table.append_column(name, column)
    return table


def _draws(table: pa.Table, seed: int) -> np.ndarray:
    return processors.uniform_at(seed, table.column(ROW).to_numpy())


def _split_block(table: pa.Table, seed: int, bounds: np.ndarray) -> pa.Table:
    which = np.searchsorted(bounds, _draws(table, seed), side="right")
    return table.drop_columns([ROW]).append_column(PART, pa.array(which, pa.int64()))


def _sample_block(table: pa.Table, seed: int, fraction: float) -> pa.Table:
    return table.filter(pa.array(_draws(table, seed) < fraction)).drop_columns([ROW])


def _key_block(table: pa.Table, seed: int) -> pa.Table:
    return table.drop_columns([ROW]).append_column(KEY, pa.array(_draws(table, seed)))


def _tagged_block(table: pa.Table, on: str, parts: int, layout: pa.Schema, renames: dict) -> pa.Table:
    """Return one side's block in the join's common layout: its hash partition, the other side's fields null."""
    table = table.rename_columns([renames.get(n, n) for n in table.column_names])
    con = _engine()
    con.register("input", table.select([on]))
    try:  # the engine's hash: keys the engine finds equal land in one partition
        part = con.sql(f"SELECT (hash({sql.quote(on)}) % {parts})::BIGINT FROM input").to_arrow_table()
    finally:
        con.unregister("input")
    columns = [
        table.column(f.name) if f.name in table.column_names else pa.nulls(len(table), f.type) for f in layout
    ]
    return pa.Table.from_arrays([*columns, part.column(0)], schema=layout.append(pa.field(PART, pa.int64())))


def _unmatched_block(table: pa.Table, fields: list[pa.Field]) -> pa.Table:
    for field in fields:
        table = table.append_column(field, pa.nulls(len(table), field.type))
    return table


def _join_group(table: pa.Table, on: str, left: list[str], wanted: list[str]) -> pa.Table:
    """Left-join the left rows of one hash partition to its right rows (the engine's equality): numbered pairs."""
    is_left = pc.is_valid(table.column(ROW))
    lhs, rhs = table.filter(is_left), table.filter(pc.invert(is_left))
    con = _engine()
    con.register("l", pa.table({"k": lhs.column(on), "i": pa.array(np.arange(len(lhs)))}))
    con.register("r", pa.table({"k": rhs.column(on), "j": pa.array(np.arange(len(rhs)))}))
    try:
        pairs = con.sql("SELECT l.i, r.j FROM l LEFT JOIN r ON l.k = r.k").to_arrow_table()
    finally:
        con.unregister("l")
        con.unregister("r")
    out = lhs.select([*left, ROW]).take(pairs.column("i"))
    matched = rhs.select([*wanted, RIGHT_ROW]).take(pairs.column("j"))  # a null index: a null row
    for name in wanted:
        out = out.append_column(name, matched.column(name))
    return out.append_column(RIGHT_ROW, pc.fill_null(matched.column(RIGHT_ROW), -1))


# the node types, on Ray


def _row_query(query: str):
    def process(p, inputs, sinks, settings, log) -> None:
        _drain(_map(_dataset(inputs["input"]), _query_block, query=query), sinks[PORT].write)

    return process


def regex_extract(p, inputs, sinks, settings, log) -> None:
    _row_query(processors.regex_query(p))(p, inputs, sinks, settings, log)


def select(p, inputs, sinks, settings, log) -> None:
    _row_query(processors.select_query(p))(p, inputs, sinks, settings, log)


def rename(p, inputs, sinks, settings, log) -> None:
    query = processors.rename_query(p, inputs["input"].schema.names)
    _row_query(query)(p, inputs, sinks, settings, log)


def label_id(p, inputs, sinks, settings, log) -> None:
    source = inputs["input"]
    ds = _dataset(source).materialize()  # read once, used twice
    distinct = list(
        _map(ds, _label_values, field=p.field).iter_batches(batch_size=None, batch_format="pyarrow")
    )
    values = (
        pa.concat_tables(distinct)
        if distinct
        else pa.table({p.field: pa.array([], source.schema.field(p.field).type)})
    )
    found = processors.labels(p.field, values, settings)  # the engine's order, on the few distinct values
    processors.log_labels(log, found)
    sinks[PORT].writer.get_meta_db().put(f"label_id.{p.output}", {"field": p.field, "labels": found})
    value_set = pa.array(found, type=source.schema.field(p.field).type)
    _drain(_map(ds, _label_block, field=p.field, output=p.output, value_set=value_set), sinks[PORT].write)


def parse_annotations(type_name: str):
    def process(p, inputs, sinks, settings, log) -> None:
        ds = _map(_dataset(inputs["input"], numbered=True), _parse_block, type_name=type_name, field=p.field)
        _drain(ds, sinks[PORT].write)

    return process


def split(p, inputs, sinks, settings, log) -> None:
    ports = list(p.ratios)

    def write(batch: pa.RecordBatch) -> None:
        part = batch.column(PART)
        batch = batch.drop_columns([PART])
        for i, port in enumerate(ports):
            sinks[port].write(batch.filter(pc.equal(part, i)))

    ds = _map(
        _dataset(inputs["input"], numbered=True), _split_block, seed=p.seed, bounds=processors.split_bounds(p)
    )
    _drain(ds, write)


def sample(p, inputs, sinks, settings, log) -> None:
    ds = _map(_dataset(inputs["input"], numbered=True), _sample_block, seed=p.seed, fraction=p.fraction)
    _drain(ds, sinks[PORT].write)


def shuffle(p, inputs, sinks, settings, log) -> None:
    ds = _map(_dataset(inputs["input"], numbered=True), _key_block, seed=p.seed).sort(KEY)
    _drain(ds, lambda batch: sinks[PORT].write(batch.drop_columns([KEY])))


def left_join(p, inputs, sinks, settings, log) -> None:
    import ray

    left, right = inputs["left"], inputs["right"]
    wanted = p.fields if p.fields is not None else [n for n in right.schema.names if n != p.on]
    layout = pa.schema(
        [
            *(f.with_nullable(True) for f in left.schema),
            pa.field(ROW, pa.int64()),
            *(right.schema.field(n).with_nullable(True) for n in wanted),
            pa.field(RIGHT_ROW, pa.int64()),
        ]
    )
    refs = _refs(left, numbered=True), _refs(right, numbered=True)
    if not refs[0]:  # no left rows, no output (a shuffle of no blocks has no schema to give)
        return
    if not refs[1]:  # nothing to match: each left row once, right fields null, in order
        ds = _map(_dataset(left, refs=refs[0]), _unmatched_block, fields=[layout.field(n) for n in wanted])
        _drain(ds, sinks[PORT].write)
        return
    parts = PARTS_PER_CPU * max(1, int(ray.cluster_resources().get("CPU", 1)))
    tagged = [
        _map(
            _dataset(source, numbered=True, refs=found),
            _tagged_block,
            on=p.on,
            parts=parts,
            layout=layout,
            renames=renames,
        )
        for source, found, renames in ((left, refs[0], {}), (right, refs[1], {ROW: RIGHT_ROW}))
    ]
    names = list(left.schema.names)
    ds = (
        tagged[0]
        .union(tagged[1])
        .groupby(PART, num_partitions=parts)
        .map_groups(
            _join_group, batch_format="pyarrow", fn_kwargs={"on": p.on, "left": names, "wanted": wanted}
        )
        .sort([ROW, RIGHT_ROW])  # each left row in input order, its matches in the right input's order
    )
    _drain(ds, lambda batch: sinks[PORT].write(batch.drop_columns([ROW, RIGHT_ROW])))


ON_RAY = {
    "left_join": left_join,
    "regex_extract": regex_extract,
    "select": select,
    "rename": rename,
    "label_id": label_id,
    "parse_voc": parse_annotations("parse_voc"),
    "parse_labelme": parse_annotations("parse_labelme"),
    "parse_coco": parse_annotations("parse_coco"),
    "split": split,
    "sample": sample,
    "shuffle": shuffle,
}
