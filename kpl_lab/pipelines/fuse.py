"""Fusion: chains of relational nodes run as one engine query; only outputs someone reads are written.

A relational node (regex_extract, select, rename, left_join, shuffle, label_id) whose output only other
relational nodes read, and that the file does not mark `keep: true`, is not written: it becomes
a common table expression in the query of each written node that reads it (its "unit"). The
inputs of a unit are written datasets, read as Arrow tables over the memory-mapped shards (no
copy; the engine reads only the columns the query touches, on all its threads).
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kpl_dataset import ReadOnlyDataset

from . import sql
from .nodes import PORT
from .processors import BATCH_ROWS, Log, Settings, Stopped, _engine, _sinks, uniform_at

FUSED = ("regex_extract", "select", "rename", "left_join", "shuffle", "label_id", "sql")
KEEPABLE = ("regex_extract", "select", "rename", "left_join", "shuffle")  # label_id and sql end units
ROW_PRESERVING = ("regex_extract", "rename", "shuffle", "label_id")
EXTRACT_ROWS = 32768
OUTPUT_BYTES = 16 << 20  # an output batch: taken from the mapped input, then written
ORDER = "__kpl_o"
TABLE = "__kpl_t"  # the inputs' tables: no name an sql node's query gives its inputs  # hidden columns: a record's position in each input, so joins keep input order


def unwritten(checked: Any) -> set[str]:
    """Return the relational nodes whose output is not written (read only by relational nodes, not kept)."""
    readers: dict[str, list[str]] = {n: [] for n in checked.order}
    for node_id in checked.order:
        for up in checked.upstream(node_id):
            readers[up].append(node_id)
    return {
        node_id
        for node_id in checked.order
        if checked.nodes[node_id].type in KEEPABLE
        and not checked.nodes[node_id].keep
        and readers[node_id]
        and all(checked.nodes[r].type in FUSED for r in readers[node_id])
    }


@dataclass
class Unit:
    """A written node and the unwritten nodes it reads through, in run order; its outside inputs."""

    final: str
    members: list[str]
    inputs: dict[tuple[str, str | None], Any] = field(default_factory=dict)  # (node, port) -> Source


def unit(checked: Any, final: str, unwritten: set[str]) -> Unit:
    """Return the unit that ends at a written relational node."""
    members = {final}
    todo = [final]
    while todo:
        for src, _ in checked.nodes[todo.pop()].edges.values():
            if src in unwritten and src not in members:
                members.add(src)
                todo.append(src)
    return Unit(final, [n for n in checked.order if n in members])


@dataclass
class _Relation:
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
    return _int64(np.arange(count))


def _int64(values: np.ndarray, missing: np.ndarray | None = None) -> pa.Array:
    """Return an Arrow int64 array over a numpy one (pa.array() would import pandas: ~1 s)."""
    values = np.ascontiguousarray(values, dtype=np.int64)
    valid = None if missing is None else pa.py_buffer(np.packbits(~missing, bitorder="little"))
    return pa.Array.from_buffers(pa.int64(), len(values), [valid, pa.py_buffer(values)])


def _all_named(pattern: str) -> bool:
    compiled = re.compile(pattern)
    return compiled.groups == len(compiled.groupindex)  # pyarrow's extract_regex takes named groups only


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
                local = _int64(local)
            else:
                local = _int64(np.where(missing[where], 0, local), missing[where])
            parts.append(self.batches[c].take(local).columns)
        if not parts:
            return [pa.nulls(0, t) for t in self.types]
        if len(parts) == 1:
            return parts[0]
        columns = [pa.concat_arrays([p[i] for p in parts]) for i in range(len(self.types))]
        order = np.concatenate(positions)
        if np.any(order[1:] < order[:-1]):
            back = _int64(np.argsort(order, kind="stable"))
            columns = [c.take(back) for c in columns]
        return columns


def _draws(seed: int) -> Any:
    """Return the engine function giving each row number its shuffle draw (as the shuffle processor's)."""

    def draw(rows: pa.ChunkedArray) -> pa.Array:
        rows = rows.combine_chunks()
        index = np.frombuffer(rows.buffers()[1], np.int64, len(rows) + rows.offset)[rows.offset :]
        values = uniform_at(seed, index)
        return pa.Array.from_buffers(pa.float64(), len(values), [None, pa.py_buffer(values)])

    return draw


class _Query:
    """The common table expressions of one unit, built node by node.

    Fields an input table gives unchanged are not carried through the query: it gives the
    input's row numbers, and the fields are taken from the mapped table after (blobs are
    neither copied into the engine nor sorted).
    """

    def __init__(self, checked: Any, unit: Unit):
        self.checked = checked
        self.unit = unit
        self.ordered = any(checked.nodes[n].type in ("left_join", "shuffle") for n in unit.members)
        self.draws: dict[str, int] = {}  # engine function name -> a shuffle's seed
        self.views: dict[str, str] = {}  # an sql node's input name -> its query
        self.tables: dict[str, pa.Table] = {}
        self.readers: list[ReadOnlyDataset] = []  # the inputs' mapped shards
        self.ctes: list[str] = []
        self.relations: dict[str, _Relation] = {}
        self._inputs: dict[tuple[str, str | None], _Relation] = {}
        self._fresh = 0

    def fresh(self) -> str:
        self._fresh += 1
        return f"{ORDER}{self._fresh}"

    def input(self, node: Any, param: str) -> _Relation:
        src, port = node.edges[param]
        if src in self.relations:
            return self.relations[src]
        if (src, port) not in self._inputs:
            source = self.unit.inputs[(src, port)]
            name, key = f"{TABLE}{len(self.tables)}", self.fresh()
            self.tables[name], reader = _table(source, key)
            self.readers.append(reader)
            names = list(source.schema.names)
            self._inputs[(src, port)] = _Relation(name, names, [key], {n: (key, name, n) for n in names})
        return self._inputs[(src, port)]

    def _extract(self, node: Any, source: _Relation) -> _Relation:
        """Return an input table with a regex_extract's groups as new columns (no match: null)."""
        table = self.tables[source.name]
        pattern = node.params.pattern

        def extract(chunk: pa.Array) -> list[pa.Array]:
            return pc.extract_regex(chunk, pattern).flatten()  # the struct's nulls go into its fields

        pieces = [  # small enough to keep every core busy to the end
            chunk.slice(start, EXTRACT_ROWS)
            for chunk in table.column(node.params.field).chunks
            for start in range(0, len(chunk), EXTRACT_ROWS)
        ]
        with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
            parts = list(pool.map(extract, pieces))
        self.drop_pages()
        groups = list(re.compile(pattern).groupindex)
        for i, group in enumerate(groups):
            pieces = [part[i] for part in parts]
            if pieces and pc.count_distinct(pieces[0]).as_py() * 16 <= len(pieces[0]):
                pieces = [pc.dictionary_encode(p) for p in pieces]  # few values: a number each
                index = pa.int32()
                if all(len(p.dictionary) <= 128 for p in pieces):  # a byte each
                    index = pa.int8()
                    pieces = [p.cast(pa.dictionary(index, pa.string())) for p in pieces]
                column = pa.chunked_array(pieces, pa.dictionary(index, pa.string()))
            else:
                column = pa.chunked_array(pieces, pa.string())
            table = table.append_column(pa.field(group, column.type), column)
        name = f"{TABLE}{len(self.tables)}"
        self.tables[name] = table
        names = [*source.names, *groups]
        (key,) = source.keys
        return _Relation(name, names, [key], {n: (key, name, n) for n in names})

    def add(self, node_id: str) -> _Relation:
        node = self.checked.nodes[node_id]
        p = node.params
        q = sql.quote
        if node.type == "sql":  # ends its unit: its query runs as written over views named as its inputs
            sql.check_select(p.query, list(p.inputs))  # validation checked it: checked again where it runs
            for name in p.inputs:
                relation = self.input(node, f"inputs.{name}")
                columns = ", ".join(q(n) for n in relation.names)
                order = ""
                if self.ordered and relation.name not in self.tables:
                    order = " ORDER BY " + ", ".join(f"{q(k)} NULLS FIRST" for k in relation.order)
                self.views[name] = f"{self.head()}SELECT {columns} FROM {q(relation.name)}{order}"
            out = _Relation("", list(node.outputs[PORT].schema.names), [])
            self.relations[node_id] = out
            return out
        if node.type == "left_join":
            left, right = self.input(node, "left"), self.input(node, "right")
            wanted = p.fields if p.fields is not None else [n for n in right.names if n != p.on]
            fresh = {k: self.fresh() for k in right.keys}
            columns = (
                [f"l.{q(n)}" for n in left.names]
                + [f"r.{q(n)}" for n in wanted]
                + [f"l.{q(k)}" for k in left.keys]
                + [f"r.{q(k)} AS {q(f)}" for k, f in fresh.items()]
            )
            body = (
                f"SELECT {', '.join(columns)} FROM {q(left.name)} AS l "
                f"LEFT JOIN {q(right.name)} AS r ON l.{q(p.on)} = r.{q(p.on)}"
            )
            origins = dict(left.origins)
            for n in wanted:
                if n in right.origins:
                    key, table, column = right.origins[n]
                    origins[n] = (fresh[key], table, column)
            order = [*left.order, *(fresh[k] for k in right.order)]
            out = _Relation("", [*left.names, *wanted], [*left.keys, *fresh.values()], origins, order)
        else:
            source = self.input(node, "input")
            keys = ", ".join(q(k) for k in source.keys)
            if node.type == "select":
                body = sql.where_query(p.where, source.name)
                out = _Relation("", source.names, source.keys, source.origins, source.order)
            elif node.type == "shuffle":
                # a record's draw: SplitMix64 of the seed and its row in the input as it would be written
                if source.name in self.tables and len(source.keys) == 1:
                    row = q(source.keys[0])  # an input table's row numbers: 0.. in order
                else:
                    ranks = ", ".join(f"{q(k)} NULLS FIRST" for k in source.order)
                    row = f"row_number() OVER (ORDER BY {ranks}) - 1"
                draw, function = self.fresh(), f"__kpl_uniform{len(self.draws)}"
                self.draws[function] = p.seed
                body = f"SELECT *, {function}({row}) AS {q(draw)} FROM {q(source.name)}"
                out = _Relation("", source.names, [*source.keys, draw], source.origins, [draw, *source.order])
            elif node.type == "rename":
                renamed = [p.fields.get(n, n) for n in source.names]
                columns = [f"{q(o)} AS {q(n)}" for o, n in zip(source.names, renamed, strict=True)]
                body = f"SELECT {', '.join([*columns, keys])} FROM {q(source.name)}"
                origins = {p.fields.get(n, n): o for n, o in source.origins.items()}
                out = _Relation("", renamed, source.keys, origins, source.order)
            elif node.type == "regex_extract" and source.name in self.tables and _all_named(p.pattern):
                out = self._extract(node, source)  # straight off an input: pyarrow, once, on all cores
                self.relations[node_id] = out
                return out
            elif node.type == "regex_extract":
                compiled = re.compile(p.pattern)
                by_index = {i: n for n, i in compiled.groupindex.items()}
                last = max(by_index)
                names = [by_index.get(i, f"__kpl_g{i}") for i in range(1, last + 1)]
                field, pattern = q(p.field), sql.string(p.pattern)
                groups = "[" + ", ".join(sql.string(n) for n in names) + "]"
                match = (
                    f"CASE WHEN regexp_matches({field}, {pattern}) "
                    f"THEN regexp_extract({field}, {pattern}, {groups}) END AS __kpl_m"
                )
                picked = ", ".join(f"__kpl_m.{q(n)} AS {q(n)}" for n in compiled.groupindex)
                body = f"SELECT * EXCLUDE (__kpl_m), {picked} FROM (SELECT *, {match} FROM {q(source.name)})"
                out = _Relation(
                    "", [*source.names, *compiled.groupindex], source.keys, source.origins, source.order
                )
            else:  # label_id ends its unit: the final query gives its input, the ids are added after
                return source
        out.name = f"n:{node_id}"
        self.ctes.append(f"{q(out.name)} AS NOT MATERIALIZED ({body})")
        self.relations[node_id] = out
        return out

    def drop_pages(self) -> None:
        """Drop the inputs' mapped pages this process has touched (streamed past, not held)."""
        for reader in self.readers:
            reader.drop_pages()

    def head(self) -> str:
        return ("WITH " + ", ".join(self.ctes) + " ") if self.ctes else ""

    def narrow(self, relation: _Relation, computed: set[str], sort: bool = True) -> str:
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

    def __init__(self, query: _Query, relation: _Relation, computed: set[str]):
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
) -> tuple[int, dict[str, int | None]]:
    """Run a unit as one query into out_dir/out; return the rows written and each member's rows out."""
    final = checked.nodes[unit.final]
    query = _Query(checked, unit)
    with sql.checking():  # one connection parses every member's SQL
        for member in unit.members:
            if stop.is_set():
                raise Stopped
            query.add(member)
    last = query.relations.get(unit.final) or query.input(final, "input")
    labelled = final.params.field if final.type == "label_id" else None
    computed = {labelled} if labelled else set()
    assemble = _Assemble(query, last, computed)
    sinks = _sinks(out_dir, {PORT: final.outputs[PORT].schema}, stop)
    sink = sinks[PORT]
    names = [*last.names, final.params.output] if labelled else last.names

    def write(batches: Any) -> None:
        for batch in (piece for narrow in batches for piece in assemble.slices(narrow)):
            columns = assemble.batch(batch)
            if labelled:
                ids = pc.index_in(batch.column(labelled), value_set=value_set)
                columns.append(pc.cast(ids, pa.int64()))
            sink.write(pa.RecordBatch.from_arrays(columns, names=names))
            query.drop_pages()  # written: the output follows input order, so few pages are read again

    try:
        with _engine(settings, stop, unit.final) as con:
            for name, table in query.tables.items():
                con.register(name, table)
            for function, seed in query.draws.items():
                con.create_function(
                    function, _draws(seed), ["BIGINT"], "DOUBLE", type="arrow", side_effects=False
                )
            for name, view in query.views.items():
                con.sql(f"CREATE TEMP VIEW {sql.quote(name)} AS {view}")
            # a label_id unit holds its narrow result anyway: it is sorted after the engine is gone
            text = final.params.query if final.type == "sql" else query.narrow(last, computed, not labelled)
            if labelled:  # the ids need every label first: the narrow result is small, keep it
                narrow = con.sql(text).to_arrow_table()
                counts = _counts(checked, unit, query, con, narrow.num_rows)
            else:
                query.drop_pages()
                write(con.sql(text).to_arrow_reader(BATCH_ROWS * 16))
                counts = _counts(checked, unit, query, con, sink.rows)
        if labelled:  # the engine is gone (its memory with it) before the output is written
            if query.ordered:  # the engine's sort would hold its join's memory too
                keys = [(k, "ascending", "at_start") for k in last.order]  # the engine's NULLS FIRST
                narrow = narrow.take(pc.sort_indices(narrow, sort_keys=keys))
            values = pc.unique(narrow.column(labelled)).drop_null()
            value_set = values.take(pc.sort_indices(values))  # the order of Python's sorted()
            labels = value_set.to_pylist()
            shown = ", ".join(map(str, labels[:20]))
            log(f"{len(labels)} labels: {shown}{' …' if len(labels) > 20 else ''}")
            # the mapping travels with the dataset: label_id.OUTPUT -> {field, labels (index = id)}
            sink.writer.get_meta_db().put(
                f"label_id.{final.params.output}", {"field": labelled, "labels": labels}
            )
            query.drop_pages()
            write(narrow.to_batches(BATCH_ROWS * 16))
        sink.close()
    except BaseException:
        sink.abort()
        raise
    return sink.rows, counts


def _counts(checked: Any, unit: Unit, query: _Query, con: Any, written: int) -> dict[str, int | None]:
    """Return each member's rows out: derived where a node keeps its input's rows, else counted."""
    counts: dict[str, int | None] = {unit.final: written}
    final = checked.nodes[unit.final]
    if final.type in ROW_PRESERVING:
        src, _ = final.edges["input"]
        if src in query.relations:
            counts[src] = written
    wanted = []
    for member in unit.members:
        if member in counts:
            continue
        node = checked.nodes[member]
        if node.type in ROW_PRESERVING:
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
