"""Fusion: chains of relational nodes run as one engine query; only outputs someone reads are written.

A relational node (regex_extract, select, rename, left_join, label_id) whose output only other
relational nodes read, and that the file does not mark `keep: true`, is not written: it becomes
a common table expression in the query of each written node that reads it (its "unit"). The
inputs of a unit are written datasets, read as Arrow tables over the memory-mapped shards (no
copy; the engine reads only the columns the query touches, on all its threads).
"""

from __future__ import annotations

import os
import re
import threading
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
from .processors import BATCH_ROWS, Log, Settings, _engine, _sinks

FUSED = ("regex_extract", "select", "rename", "left_join", "label_id")
ROW_PRESERVING = ("regex_extract", "rename", "label_id")
ORDER = "__kpl_o"  # hidden columns: a record's position in each input, so joins keep input order


def unwritten(checked: Any) -> set[str]:
    """Return the relational nodes whose output is not written (read only by relational nodes, not kept)."""
    readers: dict[str, list[str]] = {n: [] for n in checked.order}
    for node_id in checked.order:
        for up in checked.upstream(node_id):
            readers[up].append(node_id)
    return {
        node_id
        for node_id in checked.order
        if checked.nodes[node_id].type in FUSED
        and checked.nodes[node_id].type != "label_id"  # its ids come from a first pass: it ends a unit
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
    name: str
    names: list[str]  # visible fields
    keys: list[str]  # hidden order columns


def _string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _table(source: Any, key: str | None) -> pa.Table:
    """Return a dataset part as an Arrow table over its mapped shards, plus a position column when asked."""
    reader = ReadOnlyDataset(source.folder, source.part)
    table = pa.Table.from_batches(reader.iter_batches(), schema=reader.arrow_schema).cast(source.schema)
    if key is not None:
        table = table.append_column(key, pa.array(np.arange(table.num_rows, dtype=np.int64)))
    return table


def _all_named(pattern: str) -> bool:
    compiled = re.compile(pattern)
    return compiled.groups == len(compiled.groupindex)  # pyarrow's extract_regex takes named groups only


class _Query:
    """The common table expressions of one unit, built node by node."""

    def __init__(self, checked: Any, unit: Unit):
        self.checked = checked
        self.unit = unit
        self.ordered = any(checked.nodes[n].type == "left_join" for n in unit.members)
        self.tables: dict[str, pa.Table] = {}
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
            name = f"t{len(self.tables)}"
            key = self.fresh() if self.ordered else None
            self.tables[name] = _table(source, key)
            self._inputs[(src, port)] = _Relation(name, list(source.schema.names), [key] if key else [])
        return self._inputs[(src, port)]

    def _extract(self, node: Any, source: _Relation) -> _Relation:
        """Return an input table with a regex_extract's groups as new columns (no match: null)."""
        table = self.tables[source.name]
        pattern = node.params.pattern

        def extract(chunk: pa.Array) -> list[pa.Array]:
            return pc.extract_regex(chunk, pattern).flatten()  # the struct's nulls go into its fields

        with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
            parts = list(pool.map(extract, table.column(node.params.field).chunks))
        groups = list(re.compile(pattern).groupindex)
        for i, group in enumerate(groups):
            column = pa.chunked_array([part[i] for part in parts], pa.string())
            table = table.append_column(pa.field(group, pa.string()), column)
        name = f"t{len(self.tables)}"
        self.tables[name] = table
        return _Relation(name, [*source.names, *groups], source.keys)

    def add(self, node_id: str) -> _Relation:
        node = self.checked.nodes[node_id]
        p = node.params
        q = sql.quote
        if node.type == "left_join":
            left, right = self.input(node, "left"), self.input(node, "right")
            wanted = p.fields if p.fields is not None else [n for n in right.names if n != p.on]
            fresh = [self.fresh() for _ in right.keys]
            columns = (
                [f"l.{q(n)}" for n in left.names]
                + [f"r.{q(n)}" for n in wanted]
                + [f"l.{q(k)}" for k in left.keys]
                + [f"r.{q(k)} AS {q(f)}" for k, f in zip(right.keys, fresh, strict=True)]
            )
            body = (
                f"SELECT {', '.join(columns)} FROM {q(left.name)} AS l "
                f"LEFT JOIN {q(right.name)} AS r ON l.{q(p.on)} = r.{q(p.on)}"
            )
            out = _Relation("", [*left.names, *wanted], [*left.keys, *fresh])
        else:
            source = self.input(node, "input")
            keys = ", ".join(q(k) for k in source.keys)
            if node.type == "select":
                body = f"SELECT * FROM {q(source.name)} WHERE ({p.where})"
                out = _Relation("", source.names, source.keys)
            elif node.type == "rename":
                renamed = [p.fields.get(n, n) for n in source.names]
                columns = [f"{q(o)} AS {q(n)}" for o, n in zip(source.names, renamed, strict=True)]
                body = f"SELECT {', '.join(columns + ([keys] if keys else []))} FROM {q(source.name)}"
                out = _Relation("", renamed, source.keys)
            elif node.type == "regex_extract" and source.name in self.tables and _all_named(p.pattern):
                out = self._extract(node, source)  # straight off an input: pyarrow, once, on all cores
                self.relations[node_id] = out
                return out
            elif node.type == "regex_extract":
                compiled = re.compile(p.pattern)
                by_index = {i: n for n, i in compiled.groupindex.items()}
                last = max(by_index)
                names = [by_index.get(i, f"__kpl_g{i}") for i in range(1, last + 1)]
                field, pattern = q(p.field), _string(p.pattern)
                groups = "[" + ", ".join(_string(n) for n in names) + "]"
                match = (
                    f"CASE WHEN regexp_matches({field}, {pattern}) "
                    f"THEN regexp_extract({field}, {pattern}, {groups}) END AS __kpl_m"
                )
                picked = ", ".join(f"__kpl_m.{q(n)} AS {q(n)}" for n in compiled.groupindex)
                body = f"SELECT * EXCLUDE (__kpl_m), {picked} FROM (SELECT *, {match} FROM {q(source.name)})"
                out = _Relation("", [*source.names, *compiled.groupindex], source.keys)
            else:  # label_id ends its unit: the final query gives its input, the ids are added after
                return source
        out.name = f"n:{node_id}"
        self.ctes.append(f"{q(out.name)} AS NOT MATERIALIZED ({body})")
        self.relations[node_id] = out
        return out

    def select(self, relation: _Relation, tail: str, ordered: bool = True) -> str:
        q = sql.quote
        head = ("WITH " + ", ".join(self.ctes) + " ") if self.ctes else ""
        order = ""
        if ordered and relation.keys:
            order = " ORDER BY " + ", ".join(f"{q(k)} NULLS FIRST" for k in relation.keys)
        return f"{head}SELECT {tail} FROM {q(relation.name)}{order}"


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
    for member in unit.members:
        query.add(member)
    last = query.relations.get(unit.final) or query.input(final, "input")
    sinks = _sinks(out_dir, {PORT: final.outputs[PORT].schema}, stop)
    sink = sinks[PORT]
    q = sql.quote
    try:
        with _engine(settings) as con:
            for name, table in query.tables.items():
                con.register(name, table)
            labels = None
            if final.type == "label_id":
                p = final.params
                rows = con.sql(query.select(last, f"DISTINCT {q(p.field)}", ordered=False)).fetchall()
                labels = sorted(r[0] for r in rows if r[0] is not None)
                shown = ", ".join(map(str, labels[:20]))
                log(f"{len(labels)} labels: {shown}{' …' if len(labels) > 20 else ''}")
                # the mapping travels with the dataset: label_id.OUTPUT -> {field, labels (index = id)}
                sink.writer.get_meta_db().put(f"label_id.{p.output}", {"field": p.field, "labels": labels})
                value_set = pa.array(labels, type=final.inputs["input"].schema.field(p.field).type)
            columns = ", ".join(q(n) for n in last.names)
            reader = con.sql(query.select(last, columns)).to_arrow_reader(BATCH_ROWS * 16)
            for batch in reader:
                if labels is not None:
                    ids = pc.cast(
                        pc.index_in(batch.column(final.params.field), value_set=value_set), pa.int64()
                    )
                    batch = pa.RecordBatch.from_arrays(
                        [*batch.columns, ids], names=[*batch.schema.names, final.params.output]
                    )
                sink.write(batch)
            counts = _counts(checked, unit, query, con, sink.rows)
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
        head = "WITH " + ", ".join(query.ctes) + " "
        parts = ", ".join(f"(SELECT count(*) FROM {q(query.relations[m].name)})" for m in wanted)
        counted = con.sql(head + "SELECT " + parts).fetchall()[0]
        counts.update(zip(wanted, counted, strict=True))
    return counts
