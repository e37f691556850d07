"""Relational node types: each checks its fields, writes its expression in its unit's query, and has its Ray form.

regex_extract, select, rename, left_join, label_id, shuffle and sql run as one engine query
per unit (fuse.py); on the Ray backend those with a Ray form run block by block there.
"""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from .. import processors, ray_backend, sql
from ..fuse import TABLE, Relation
from ..ray_backend import PART, ROW
from ..schema import PORT, Output
from .base import Numbering, Params, Relational, dataset_of, find_field, is_new

EXTRACT_ROWS = 32768  # a regex_extract's piece of a column, matched by one thread
KEY = "__kpl_key"  # a shuffle's draw on Ray
RIGHT_ROW = "__kpl_right_row"  # a join's right record number on Ray


class RegexParams(Params):
    input: str
    field: str = Field(description="String field to match")
    pattern: str = Field(
        description="regular expression; each named group (?P<name>…) becomes a String field"
    )


class RegexExtract(Relational):
    name, params, keeps_rows = "regex_extract", RegexParams, True
    description = (
        "Named groups of a regular expression become new String fields (null where it does not match)."
    )

    def check(self, p, inputs, catalog, report):
        schema = dataset_of(inputs, "input", report)
        try:
            groups = list(re.compile(p.pattern).groupindex)
        except re.error as err:
            report("pattern", f"not a regular expression: {err}")
            return None
        if not groups:
            report("pattern", "has no named group (?P<name>…) to extract")
            return None
        probe = sql.describe(
            {"t": pa.schema([("s", pa.string())])},
            f"SELECT regexp_matches(s, {sql.string(p.pattern)}) FROM t",
        )
        if isinstance(probe, str):
            report("pattern", f"the engine refuses it: {probe}")
            return None
        if schema is None:
            return None
        field = find_field(schema, p.field, "field", "the input", report)
        if field is None:
            return None
        if field.type != pa.string():
            report("field", f'field "{p.field}" is not a String')
            return None
        if not all(is_new(schema, g, "pattern", report) for g in groups):
            return None
        out = schema
        for g in groups:
            out = out.append(pa.field(g, pa.string(), nullable=True))
        return {PORT: Output("dataset", out)}

    def query(self, q, node):
        p = node.params
        source = q.input(node, "input")
        compiled = re.compile(p.pattern)
        if source.name in q.tables and compiled.groups == len(compiled.groupindex):
            # straight off an input: pyarrow, once, on all cores (its extract_regex takes named groups only)
            return _extract(q, p, source), None
        by_index = {i: n for n, i in compiled.groupindex.items()}
        last = max(by_index)
        names = [by_index.get(i, f"__kpl_g{i}") for i in range(1, last + 1)]
        field, pattern = sql.quote(p.field), sql.string(p.pattern)
        groups = "[" + ", ".join(sql.string(n) for n in names) + "]"
        match = (
            f"CASE WHEN regexp_matches({field}, {pattern}) "
            f"THEN regexp_extract({field}, {pattern}, {groups}) END AS __kpl_m"
        )
        picked = ", ".join(f"__kpl_m.{sql.quote(n)} AS {sql.quote(n)}" for n in compiled.groupindex)
        body = f"SELECT * EXCLUDE (__kpl_m), {picked} FROM (SELECT *, {match} FROM {sql.quote(source.name)})"
        names = [*source.names, *compiled.groupindex]
        return Relation("", names, source.keys, source.origins, source.order), body

    def on_ray(self, p, inputs, sinks, settings, log):
        ray_backend.row_query(regex_query(p), inputs, sinks)


def regex_query(p) -> str:
    """Return regex_extract's query over table `input` (row by row: any batch of the input gives its rows)."""
    groups = re.compile(p.pattern).groupindex
    field, pattern = sql.quote(p.field), sql.string(p.pattern)
    columns = ", ".join(
        f"CASE WHEN regexp_matches({field}, {pattern}) THEN regexp_extract({field}, {pattern}, {index}) END AS {sql.quote(name)}"
        for name, index in groups.items()
    )
    return f"SELECT *, {columns} FROM input"


def _extract(q: Any, p: Any, source: Relation) -> Relation:
    """Return an input table with a regex_extract's groups as new columns (no match: null)."""
    table = q.tables[source.name]
    pattern = p.pattern

    def extract(chunk: pa.Array) -> list[pa.Array]:
        return pc.extract_regex(chunk, pattern).flatten()  # the struct's nulls go into its fields

    pieces = [  # small enough to keep every core busy to the end
        chunk.slice(start, EXTRACT_ROWS)
        for chunk in table.column(p.field).chunks
        for start in range(0, len(chunk), EXTRACT_ROWS)
    ]
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        parts = list(pool.map(extract, pieces))
    q.drop_pages()
    groups = list(re.compile(pattern).groupindex)
    for i, group in enumerate(groups):
        pieces = [part[i] for part in parts]
        if pieces and pc.count_distinct(pieces[0]).as_py() * 16 <= len(pieces[0]):
            pieces = [pc.dictionary_encode(piece) for piece in pieces]  # few values: a number each
            index = pa.int32()
            if all(len(piece.dictionary) <= 128 for piece in pieces):  # a byte each
                index = pa.int8()
                pieces = [piece.cast(pa.dictionary(index, pa.string())) for piece in pieces]
            column = pa.chunked_array(pieces, pa.dictionary(index, pa.string()))
        else:
            column = pa.chunked_array(pieces, pa.string())
        table = table.append_column(pa.field(group, column.type), column)
    name = f"{TABLE}{len(q.tables)}"
    q.tables[name] = table
    names = [*source.names, *groups]
    (key,) = source.keys
    return Relation(name, names, [key], {n: (key, name, n) for n in names})


class SelectParams(Params):
    input: str
    where: str = Field(description="SQL boolean expression over the fields, e.g. type = 'JPEGImages'")


class Select(Relational):
    name, params = "select", SelectParams
    description = "Keep the records where a boolean SQL expression holds."

    def check(self, p, inputs, catalog, report):
        schema = dataset_of(inputs, "input", report)
        if schema is None:
            return None
        try:
            result = sql.describe({"input": schema}, sql.where_query(p.where, "input"))
            check = sql.describe({"input": schema}, sql.where_query(p.where, "input", value="w"))
        except sql.Refused as err:
            report("where", str(err))
            return None
        if isinstance(result, str):
            report("where", result)
            return None
        if not isinstance(check, str) and check.field("w").type != pa.bool_():
            report("where", f"is not a boolean expression (it gives {check.field('w').type})")
            return None
        return {PORT: Output("dataset", schema)}

    def query(self, q, node):
        source = q.input(node, "input")
        body = sql.where_query(node.params.where, source.name)  # written by the engine from its parse tree
        return Relation("", source.names, source.keys, source.origins, source.order), body

    def on_ray(self, p, inputs, sinks, settings, log):
        ray_backend.row_query(sql.where_query(p.where, "input"), inputs, sinks)


class RenameParams(Params):
    input: str
    fields: dict[str, str] = Field(min_length=1, description="old name -> new name")


class Rename(Relational):
    name, params, keeps_rows = "rename", RenameParams, True
    description = "Rename fields; the old names are gone."

    def check(self, p, inputs, catalog, report):
        schema = dataset_of(inputs, "input", report)
        if schema is None:
            return None
        ok = all(
            find_field(schema, old, f"fields.{old}", "the input", report) is not None for old in p.fields
        )
        final = [p.fields.get(n, n) for n in schema.names]
        for new in p.fields.values():
            if final.count(new) > 1:
                report(f"fields.{new}", f'field "{new}" would appear twice')
                ok = False
        if not ok:
            return None
        return {
            PORT: Output("dataset", pa.schema([f.with_name(p.fields.get(f.name, f.name)) for f in schema]))
        }

    def query(self, q, node):
        p, source = node.params, q.input(node, "input")
        renamed = [p.fields.get(n, n) for n in source.names]
        columns = [f"{sql.quote(o)} AS {sql.quote(n)}" for o, n in zip(source.names, renamed, strict=True)]
        keys = ", ".join(sql.quote(k) for k in source.keys)
        body = f"SELECT {', '.join([*columns, keys])} FROM {sql.quote(source.name)}"
        origins = {p.fields.get(n, n): o for n, o in source.origins.items()}
        return Relation("", renamed, source.keys, origins, source.order), body

    def on_ray(self, p, inputs, sinks, settings, log):
        names = inputs["input"].schema.names
        columns = ", ".join(f"{sql.quote(n)} AS {sql.quote(p.fields.get(n, n))}" for n in names)
        ray_backend.row_query(f"SELECT {columns} FROM input", inputs, sinks)


class JoinParams(Params):
    left: str
    right: str
    on: str = Field(description="key field present in both inputs")
    fields: list[str] | None = Field(None, description="right fields to add (default: all but the key)")


class LeftJoin(Relational):
    name, params, ports, sorts = "left_join", JoinParams, ("left", "right"), True
    description = "Every left record once per matching right record; right fields null where none match."

    def check(self, p, inputs, catalog, report):
        left = dataset_of(inputs, "left", report)
        right = dataset_of(inputs, "right", report)
        if left is None or right is None:
            return None
        lkey = find_field(left, p.on, "on", f'left input "{p.left}"', report)
        rkey = find_field(right, p.on, "on", f'right input "{p.right}"', report)
        if lkey is None or rkey is None:
            return None
        if lkey.type != rkey.type:
            report("on", f'field "{p.on}" is {lkey.type} on the left and {rkey.type} on the right')
            return None
        wanted = p.fields if p.fields is not None else [n for n in right.names if n != p.on]
        out = left
        for name in wanted:
            field = find_field(right, name, "fields", f'right input "{p.right}"', report)
            if field is None:
                return None
            if name in left.names:
                report("fields", f'field "{name}" is in both inputs; rename it in one of them first')
                return None
            out = out.append(field.with_nullable(True))
        return {PORT: Output("dataset", out)}

    def query(self, q, node):
        p, quote = node.params, sql.quote
        left, right = q.input(node, "left"), q.input(node, "right")
        wanted = p.fields if p.fields is not None else [n for n in right.names if n != p.on]
        fresh = {k: q.fresh() for k in right.keys}
        columns = (
            [f"l.{quote(n)}" for n in left.names]
            + [f"r.{quote(n)}" for n in wanted]
            + [f"l.{quote(k)}" for k in left.keys]
            + [f"r.{quote(k)} AS {quote(f)}" for k, f in fresh.items()]
        )
        body = (
            f"SELECT {', '.join(columns)} FROM {quote(left.name)} AS l "
            f"LEFT JOIN {quote(right.name)} AS r ON l.{quote(p.on)} = r.{quote(p.on)}"
        )
        origins = dict(left.origins)
        for n in wanted:
            if n in right.origins:
                key, table, column = right.origins[n]
                origins[n] = (fresh[key], table, column)
        order = [*left.order, *(fresh[k] for k in right.order)]
        return Relation("", [*left.names, *wanted], [*left.keys, *fresh.values()], origins, order), body

    def on_ray(self, p, inputs, sinks, settings, log):
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
        refs = ray_backend.put_blocks(left, numbered=True), ray_backend.put_blocks(right, numbered=True)
        if not refs[0]:  # no left rows, no output (a shuffle of no blocks has no schema to give)
            return
        if not refs[1]:  # nothing to match: each left row once, right fields null, in order
            ds = ray_backend.map_blocks(
                ray_backend.dataset(left, refs=refs[0]),
                _unmatched_block,
                fields=[layout.field(n) for n in wanted],
            )
            ray_backend.drain(ds, sinks[PORT].write)
            return
        parts = ray_backend.PARTS_PER_CPU * max(1, int(ray.cluster_resources().get("CPU", 1)))
        tagged = [
            ray_backend.map_blocks(
                ray_backend.dataset(source, numbered=True, refs=found),
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
        ray_backend.drain(ds, lambda batch: sinks[PORT].write(batch.drop_columns([ROW, RIGHT_ROW])))


# a join's blocks on Ray's workers


def _tagged_block(table: pa.Table, on: str, parts: int, layout: pa.Schema, renames: dict) -> pa.Table:
    """Return one side's block in the join's common layout: its hash partition, the other side's fields null."""
    table = table.rename_columns([renames.get(n, n) for n in table.column_names])
    con = ray_backend.engine()
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
    con = ray_backend.engine()
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


class LabelIdParams(Params):
    input: str
    field: str = Field(description="field holding the label (e.g. the class name)")
    output: str = Field(description="new Int field: ids 0..n-1 over the sorted distinct labels")


class LabelId(Relational):
    name, params, keeps_rows = "label_id", LabelIdParams, True
    keepable = False  # it ends its unit: the ids need every label first
    description = "Number the sorted distinct values of a field 0..n-1; the mapping goes in the metadata."

    def check(self, p, inputs, catalog, report):
        schema = dataset_of(inputs, "input", report)
        if schema is None:
            return None
        field = find_field(schema, p.field, "field", "the input", report)
        if field is None or not is_new(schema, p.output, "output", report):
            return None
        if pa.types.is_nested(field.type) or field.type == pa.binary():
            report("field", f'field "{p.field}" must be a String, Int, Float or Bool')
            return None
        return {
            PORT: Output("dataset", schema.append(pa.field(p.output, pa.int64(), nullable=field.nullable)))
        }

    def query(self, q, node):
        return q.input(node, "input"), None  # the unit's query gives its input; the ids are added after

    def numbering(self, p):
        return Numbering(p.field, p.output, f"label_id.{p.output}")

    def on_ray(self, p, inputs, sinks, settings, log):
        source = inputs["input"]
        ds = ray_backend.dataset(source).materialize()  # read once, used twice
        distinct = list(
            ray_backend.map_blocks(ds, _label_values, field=p.field).iter_batches(
                batch_size=None, batch_format="pyarrow"
            )
        )
        values = (
            pa.concat_tables(distinct)
            if distinct
            else pa.table({p.field: pa.array([], source.schema.field(p.field).type)})
        )
        found = _labels(p.field, values, settings)  # the engine's order, on the few distinct values
        numbering = self.numbering(p)
        log(numbering.shown(found))
        sinks[PORT].writer.get_meta_db().put(numbering.key, {"field": p.field, "labels": found})
        value_set = pa.array(found, type=source.schema.field(p.field).type)
        ds = ray_backend.map_blocks(ds, _label_block, field=p.field, output=p.output, value_set=value_set)
        ray_backend.drain(ds, sinks[PORT].write)


def _labels(field: str, values: Any, settings: processors.Settings) -> list:
    """Return the sorted distinct non-null values of field in values (a table or a reader)."""
    with processors.engine(settings) as con:
        con.register("input", values)
        name = sql.quote(field)
        query = f"SELECT DISTINCT {name} FROM input WHERE {name} IS NOT NULL ORDER BY {name}"
        rows = con.sql(query).fetchall()
    return [r[0] for r in rows]


def _label_values(table: pa.Table, field: str) -> pa.Table:
    return pa.table({field: pc.unique(table.column(field).combine_chunks())})


def _label_block(table: pa.Table, field: str, output: str, value_set: pa.Array) -> pa.Table:
    ids = pc.cast(pc.index_in(table.column(field).combine_chunks(), value_set=value_set), pa.int64())
    return table.append_column(output, ids)


class ShuffleParams(Params):
    input: str
    seed: int = 0


class Shuffle(Relational):
    name, params, keeps_rows, sorts = "shuffle", ShuffleParams, True, True
    description = "Put the records in a random order (the same for the same seed)."

    def check(self, p, inputs, catalog, report):
        schema = dataset_of(inputs, "input", report)
        return None if schema is None else {PORT: Output("dataset", schema)}

    def query(self, q, node):
        source = q.input(node, "input")
        # a record's draw: SplitMix64 of the seed and its row in the input as it would be written
        if source.name in q.tables and len(source.keys) == 1:
            row = sql.quote(source.keys[0])  # an input table's row numbers: 0.. in order
        else:
            ranks = ", ".join(f"{sql.quote(k)} NULLS FIRST" for k in source.order)
            row = f"row_number() OVER (ORDER BY {ranks}) - 1"
        draw, function = q.fresh(), f"__kpl_uniform{len(q.draws)}"
        q.draws[function] = _draws(node.params.seed)
        body = f"SELECT *, {function}({row}) AS {sql.quote(draw)} FROM {sql.quote(source.name)}"
        return Relation("", source.names, [*source.keys, draw], source.origins, [draw, *source.order]), body

    def on_ray(self, p, inputs, sinks, settings, log):
        numbered = ray_backend.dataset(inputs["input"], numbered=True)
        ds = ray_backend.map_blocks(numbered, _key_block, seed=p.seed).sort(KEY)
        ray_backend.drain(ds, lambda batch: sinks[PORT].write(batch.drop_columns([KEY])))


def _draws(seed: int) -> Any:
    """Return the engine function giving each row number its shuffle draw (as the shuffle processor's)."""

    def draw(rows: pa.ChunkedArray) -> pa.Array:
        rows = rows.combine_chunks()
        index = np.frombuffer(rows.buffers()[1], np.int64, len(rows) + rows.offset)[rows.offset :]
        values = processors.uniform_at(seed, index)
        return pa.Array.from_buffers(pa.float64(), len(values), [None, pa.py_buffer(values)])

    return draw


def _key_block(table: pa.Table, seed: int) -> pa.Table:
    return table.drop_columns([ROW]).append_column(KEY, pa.array(ray_backend.draws(table, seed)))


class SqlParams(Params):
    inputs: dict[str, str] = Field(min_length=1, description="table name in the query -> node or node.port")
    query: str = Field(description="one SELECT over the named tables")


class Sql(Relational):
    name, params, ports, named_inputs = "sql", SqlParams, (), True
    keepable = False  # it ends its unit: its result has no row numbers to carry the inputs' fields by
    description = "One SELECT over the named inputs (DuckDB SQL; no file access, no other tables)."

    def check(self, p, inputs, catalog, report):
        tables = {}
        for key in p.inputs:
            schema = dataset_of(inputs, f"inputs.{key}", report)
            if schema is None:
                return None
            tables[key] = schema
        try:
            sql.check_select(p.query, list(tables))
        except sql.Refused as err:
            report("query", str(err))
            return None
        result = sql.describe(tables, p.query)
        if isinstance(result, str):
            report("query", result)
            return None
        return {PORT: Output("dataset", result)}

    def query(self, q, node):
        p, quote = node.params, sql.quote
        sql.check_select(p.query, list(p.inputs))  # validation checked it: checked again where it runs
        for name in p.inputs:  # its query runs as written over views named as its inputs
            relation = q.input(node, f"inputs.{name}")
            columns = ", ".join(quote(n) for n in relation.names)
            order = ""
            if q.ordered and relation.name not in q.tables:
                order = " ORDER BY " + ", ".join(f"{quote(k)} NULLS FIRST" for k in relation.order)
            q.views[name] = f"{q.head()}SELECT {columns} FROM {quote(relation.name)}{order}"
        return Relation("", list(node.outputs[PORT].schema.names), []), None

    def unit_query(self, q, p, last, computed, sort):
        return p.query
