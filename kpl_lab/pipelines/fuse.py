"""Fusion: chains of relational nodes run as one engine query; only outputs someone reads are written.

A relational node (a `Relational` node type: regex_extract, select, rename, left_join, shuffle,
label_id, sql) whose output only other relational nodes read, that may go unwritten (`keepable`)
and that the file does not mark `keep: true`, is not written: it becomes a common table
expression in the query of each written node that reads it (its "unit"); each node type writes
its own expression (`query`). The inputs of a unit are written datasets, read as Arrow tables
over the memory-mapped shards (no copy; the engine reads only the columns the query touches,
on all its threads).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kpl_dataset import ReadOnlyDataset

from . import sql
from .processors import BATCH_ROWS, Log, Settings, Stopped, _sinks, engine, int64_array

OUTPUT_BYTES = 16 << 20  # an output batch: taken from the mapped input, then written
ORDER = "__kpl_o"
TABLE = "__kpl_t"  # the inputs' tables: no name an sql node's query gives its inputs  # hidden columns: a record's position in each input, so joins keep input order


def unwritten(checked: Any) -> set[str]:
    """Return the relational nodes whose output is not written.

    Those read only by relational nodes (and not kept), and those read only by one router
    (split, sample), which then writes its ports as that unit's write.
    """
    readers: dict[str, list[str]] = {n: [] for n in checked.order}
    for node_id in checked.order:
        for up in checked.upstream(node_id):
            readers[up].append(node_id)

    def fused(node_id: str) -> bool:
        node, read_by = checked.nodes[node_id], readers[node_id]
        if not node.node_type.fused or node.keep or not read_by:
            return False
        if len(read_by) == 1 and checked.nodes[read_by[0]].node_type.routes:
            return True
        return node.node_type.keepable and all(checked.nodes[r].node_type.fused for r in read_by)

    return {node_id for node_id in checked.order if fused(node_id)}


def routed(checked: Any, node_id: str, unwritten: set[str]) -> bool:
    """Return whether a node is a router ending a unit: one whose input is not written."""
    node = checked.nodes[node_id]
    return node.node_type.routes and node.edges["input"][0] in unwritten


@dataclass
class Unit:
    """A written node and the unwritten nodes it reads through, in run order; its outside inputs.

    `final` is written; it is the last relational node (`last`) or a router reading that one.
    """

    final: str
    members: list[str]
    last: str = ""  # the relational node whose records the unit writes (default: final)
    inputs: dict[tuple[str, str | None], Any] = field(default_factory=dict)  # (node, port) -> Source

    def __post_init__(self) -> None:
        self.last = self.last or self.final

    @property
    def relational(self) -> list[str]:
        """Return the members that are parts of the unit's query (all but a router ending it)."""
        return [m for m in self.members if m != self.final or self.last == self.final]


def unit(checked: Any, final: str, unwritten: set[str]) -> Unit:
    """Return the unit that ends at a written relational node, or at a router after an unwritten one."""
    members = {final}
    todo = [final]
    while todo:
        for src, _ in checked.nodes[todo.pop()].edges.values():
            if src in unwritten and src not in members:
                members.add(src)
                todo.append(src)
    node = checked.nodes[final]
    last = final if node.node_type.fused else node.edges["input"][0]
    return Unit(final, [n for n in checked.order if n in members], last)


@dataclass
class Relation:
    """A table or expression of the query: its visible fields, where each comes from, its row keys."""

    name: str
    names: list[str]  # visible fields
    keys: list[str]  # hidden columns: a record's row in an input table (where to gather from), shuffle draws
    origins: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # field -> (key, table, column)
    order: list[str] = field(default_factory=list)  # hidden columns giving its records' order (default: keys)

    def __post_init__(self) -> None:
        self.order = self.order or list(self.keys)


def _table(source: Any, key: str) -> tuple[pa.Table, ReadOnlyDataset]:
    """Return a dataset part as an Arrow table over its mapped shards, plus its row numbers; its reader."""
    reader = ReadOnlyDataset(source.folder, source.part)
    table = pa.Table.from_batches(reader.iter_batches(), schema=reader.arrow_schema).cast(source.schema)
    reader.drop_pages()  # the checksums touched every page: each step touches again what it reads
    return table.append_column(key, _rows(table.num_rows)), reader


def _rows(count: int) -> pa.Array:
    """Return the row numbers 0..count-1, int32 where they fit (the engine's join and result hold them)."""
    if count < 2**31:
        return pa.Array.from_buffers(
            pa.int32(), count, [None, pa.py_buffer(np.arange(count, dtype=np.int32))]
        )
    return int64_array(np.arange(count))


class _Gather:
    """Fields of an input table taken by row number, chunk by chunk (no copy of the whole column)."""

    def __init__(self, table: pa.Table, columns: list[str]):
        self.batches = table.select(columns).to_batches()
        self.starts = np.cumsum([0] + [b.num_rows for b in self.batches])
        self.types = [table.schema.field(c).type for c in columns]

    def take(self, rows: pa.Array) -> list[pa.Array]:
        """Return the fields at these rows (a null row gives nulls), in their order."""
        kind = np.int32 if pa.types.is_int32(rows.type) else np.int64
        index = np.frombuffer(rows.buffers()[1], kind, len(rows) + rows.offset)[rows.offset :]
        missing = rows.is_null().to_numpy(zero_copy_only=False) if rows.null_count else None
        if missing is not None:
            index = np.where(missing, 0, index)  # a null slot's value is undefined
        chunk = np.searchsorted(self.starts, index, side="right") - 1
        if missing is not None:  # a null row goes with the chunk before it, so the order holds
            before = np.maximum.accumulate(np.where(missing, 0, np.arange(len(chunk))))
            chunk = chunk[before]
        parts: list[list[pa.Array]] = []
        positions = []
        for c in np.unique(chunk):
            where = np.flatnonzero(chunk == c)
            positions.append(where)
            local = index[where] - self.starts[c]
            if missing is None:
                local = int64_array(local)
            else:
                local = int64_array(np.where(missing[where], 0, local), missing[where])
            parts.append(self.batches[c].take(local).columns)
        if not parts:
            return [pa.nulls(0, t) for t in self.types]
        if len(parts) == 1:
            return parts[0]
        columns = [pa.concat_arrays([p[i] for p in parts]) for i in range(len(self.types))]
        order = np.concatenate(positions)
        if np.any(order[1:] < order[:-1]):
            back = int64_array(np.argsort(order, kind="stable"))
            columns = [c.take(back) for c in columns]
        return columns


class Query:
    """The common table expressions of one unit, built node by node.

    Fields an input table gives unchanged are not carried through the query: it gives the
    input's row numbers, and the fields are taken from the mapped table after (blobs are
    neither copied into the engine nor sorted).
    """

    def __init__(self, checked: Any, unit: Unit):
        self.checked = checked
        self.unit = unit
        self.ordered = any(checked.nodes[n].node_type.sorts for n in unit.members)
        self.draws: dict[str, Any] = {}  # engine function name -> a shuffle's draws (row number -> [0, 1))
        self.views: dict[str, str] = {}  # an sql node's input name -> its query
        self.tables: dict[str, pa.Table] = {}
        self.readers: list[ReadOnlyDataset] = []  # the inputs' mapped shards
        self.ctes: list[str] = []
        self.relations: dict[str, Relation] = {}
        self._inputs: dict[tuple[str, str | None], Relation] = {}
        self._fresh = 0

    def fresh(self) -> str:
        self._fresh += 1
        return f"{ORDER}{self._fresh}"

    def input(self, node: Any, param: str) -> Relation:
        src, port = node.edges[param]
        if src in self.relations:
            return self.relations[src]
        if (src, port) not in self._inputs:
            source = self.unit.inputs[(src, port)]
            name, key = f"{TABLE}{len(self.tables)}", self.fresh()
            self.tables[name], reader = _table(source, key)
            self.readers.append(reader)
            names = list(source.schema.names)
            self._inputs[(src, port)] = Relation(name, names, [key], {n: (key, name, n) for n in names})
        return self._inputs[(src, port)]

    def add(self, node_id: str) -> Relation:
        """Add a member of the unit: its node type writes its expression (a common table expression)."""
        node = self.checked.nodes[node_id]
        out, body = node.node_type.query(self, node)
        if body is not None:
            out.name = f"n:{node_id}"
            self.ctes.append(f"{sql.quote(out.name)} AS NOT MATERIALIZED ({body})")
        self.relations[node_id] = out
        return out

    def drop_pages(self) -> None:
        """Drop the inputs' mapped pages this process has touched (streamed past, not held)."""
        for reader in self.readers:
            reader.drop_pages()

    def head(self) -> str:
        return ("WITH " + ", ".join(self.ctes) + " ") if self.ctes else ""

    def narrow(self, relation: Relation, computed: set[str], sort: bool = True) -> str:
        """Return the query giving the fields not taken from an input (and those in computed), and row keys."""
        q = sql.quote
        own = [n for n in relation.names if n not in relation.origins or n in computed]
        order = ""
        if self.ordered and sort:
            order = " ORDER BY " + ", ".join(f"{q(k)} NULLS FIRST" for k in relation.order)
        columns = ", ".join(q(c) for c in [*own, *relation.keys])
        return f"{self.head()}SELECT {columns} FROM {q(relation.name)}{order}"


class _Assemble:
    """Build output batches from the narrow query's batches and the input tables."""

    def __init__(self, query: Query, relation: Relation, computed: set[str]):
        self.names = relation.names
        self.origins = relation.origins
        self.own = {n for n in relation.names if n not in relation.origins or n in computed}
        wanted: dict[tuple[str, str], list[str]] = {}
        for n in relation.names:
            if n not in self.own:
                key, table, column = relation.origins[n]
                wanted.setdefault((key, table), []).append(column)
        self.gathers = {kt: _Gather(query.tables[kt[1]], cols) for kt, cols in wanted.items()}
        self.columns = wanted
        per_row = sum(  # the buffers' sizes: no page is read (nbytes reads the offsets: ~26 MB of pages)
            query.tables[t].select(cols).get_total_buffer_size() / max(1, query.tables[t].num_rows)
            for (_, t), cols in wanted.items()
        )
        self.rows = max(1, min(BATCH_ROWS * 16, int(OUTPUT_BYTES // max(per_row, 1))))

    def slices(self, narrow: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        """Cut a narrow batch so an output batch holds about OUTPUT_BYTES (large blobs: few rows)."""
        for start in range(0, narrow.num_rows, self.rows):
            yield narrow.slice(start, self.rows)

    def batch(self, narrow: pa.RecordBatch) -> list[pa.Array]:
        taken: dict[tuple[str, str, str], pa.Array] = {}
        for (key, table), gather in self.gathers.items():
            for column, values in zip(
                self.columns[(key, table)], gather.take(narrow.column(key)), strict=True
            ):
                taken[(key, table, column)] = values
        return [narrow.column(n) if n in self.own else taken[self.origins[n]] for n in self.names]


def run(
    checked: Any,
    unit: Unit,
    out_dir: Path,
    stop: threading.Event,
    log: Log,
    settings: Settings,
) -> tuple[dict[str, int], dict[str, int | None]]:
    """Run a unit as one query into out_dir/PORT for each port; return the rows of each and each member's rows out.

    A router ending the unit (split, sample) sends each record of the last relational node to
    its port as it is written: the last node's output is never written itself.
    """
    final, end = checked.nodes[unit.final], checked.nodes[unit.last]
    router = None if unit.final == unit.last else final
    query = Query(checked, unit)
    with sql.checking():  # one connection parses every member's SQL
        for member in unit.relational:
            if stop.is_set():
                raise Stopped
            query.add(member)
    last = query.relations[unit.last]
    numbering = end.node_type.numbering(end.params)
    labelled = numbering.field if numbering else None
    computed = {labelled} if labelled else set()
    assemble = _Assemble(query, last, computed)
    sinks = _sinks(out_dir, {port: out.schema for port, out in final.outputs.items()}, stop)
    ports = list(sinks.values())
    names = [*last.names, numbering.output] if numbering else last.names
    total = 0  # records of the last relational node so far: the router's row numbers

    def write(batches: Any) -> None:
        nonlocal total
        for piece in (piece for narrow in batches for piece in assemble.slices(narrow)):
            start, total = total, total + piece.num_rows
            if router is None:
                routed = [(ports[0], piece)]
            else:
                which = router.node_type.route(router.params, np.arange(start, total, dtype=np.uint64))
                routed = [
                    (sink, piece.take(int64_array(np.flatnonzero(which == i))))
                    for i, sink in enumerate(ports)
                ]
            for sink, batch in routed:
                if not batch.num_rows:
                    continue
                columns = assemble.batch(batch)
                if labelled:
                    ids = pc.index_in(batch.column(labelled), value_set=value_set)
                    columns.append(pc.cast(ids, pa.int64()))
                sink.write(pa.RecordBatch.from_arrays(columns, names=names))
            query.drop_pages()  # written: the output follows input order, so few pages are read again

    try:
        with engine(settings, stop, unit.final) as con:
            for name, table in query.tables.items():
                con.register(name, table)
            for name, draw in query.draws.items():
                con.create_function(name, draw, ["BIGINT"], "DOUBLE", type="arrow", side_effects=False)
            for name, view in query.views.items():
                con.sql(f"CREATE TEMP VIEW {sql.quote(name)} AS {view}")
            # a numbering unit holds its narrow result anyway: it is sorted after the engine is gone
            text = end.node_type.unit_query(query, end.params, last, computed, not labelled)
            if labelled:  # the ids need every label first: the narrow result is small, keep it
                narrow = con.sql(text).to_arrow_table()
                counts = _counts(checked, unit, query, con, narrow.num_rows)
            else:
                query.drop_pages()
                write(con.sql(text).to_arrow_reader(BATCH_ROWS * 16))
                counts = _counts(checked, unit, query, con, total)
        if labelled:  # the engine is gone (its memory with it) before the output is written
            if query.ordered:  # the engine's sort would hold its join's memory too
                keys = [(k, "ascending", "at_start") for k in last.order]  # the engine's NULLS FIRST
                narrow = narrow.take(pc.sort_indices(narrow, sort_keys=keys))
            values = pc.unique(narrow.column(labelled)).drop_null()
            value_set = values.take(pc.sort_indices(values))  # the order of Python's sorted()
            labels = value_set.to_pylist()
            log(numbering.shown(labels))
            for sink in ports:  # the mapping travels with the dataset: {field, labels (index = id)}
                sink.writer.get_meta_db().put(numbering.key, {"field": labelled, "labels": labels})
            query.drop_pages()
            write(narrow.to_batches(BATCH_ROWS * 16))
        for sink in ports:
            sink.close()
    except BaseException:
        for sink in ports:
            sink.abort()
        raise
    return {port: sink.rows for port, sink in sinks.items()}, counts


def _counts(checked: Any, unit: Unit, query: Query, con: Any, written: int) -> dict[str, int | None]:
    """Return each relational member's rows out: derived where a node keeps its input's rows, else counted."""
    counts: dict[str, int | None] = {unit.last: written}
    last = checked.nodes[unit.last]
    if last.node_type.keeps_rows:
        src, _ = last.edges["input"]
        if src in query.relations:
            counts[src] = written
    wanted = []
    for member in unit.relational:
        if member in counts:
            continue
        node = checked.nodes[member]
        if node.node_type.keeps_rows:
            src, port = node.edges["input"]
            rows = counts.get(src) if src in query.relations else unit.inputs[(src, port)].rows
            if rows is not None:
                counts[member] = rows
                continue
        wanted.append(member)
    if wanted:
        q = sql.quote
        head = query.head()
        for m in wanted:  # one query each: scalar subqueries would read every column of the inputs
            counts[m] = con.sql(f"{head}SELECT count(*) FROM {q(query.relations[m].name)}").fetchall()[0][0]
    return counts
