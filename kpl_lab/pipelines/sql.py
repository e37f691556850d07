"""The query engine: DuckDB over Arrow, with file access, extensions and settings locked."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import duckdb
import pyarrow as pa

from .schema import dataset_schema

ROW = "__kpl_row"  # the input order of a record, added while streaming so joins keep it


def connect(memory_limit: str | None = None, temp_directory: str | None = None) -> duckdb.DuckDBPyConnection:
    """Return an in-memory DuckDB that cannot read or write files or load extensions (spills only)."""
    con = duckdb.connect(":memory:")
    if memory_limit:
        con.execute(f"SET memory_limit = '{_literal(memory_limit)}'")
    if temp_directory:
        con.execute(f"SET temp_directory = '{_literal(temp_directory)}'")
    con.execute("SET preserve_insertion_order = true")
    # hand freed memory back to the system at once: by default the engine keeps up to 128 MiB
    # (512 MiB after a bulk free) cached per process, which pyarrow's allocations cannot reuse
    con.execute("SET allocator_flush_threshold = '1MiB'")
    con.execute("SET allocator_bulk_deallocation_flush_threshold = '1MiB'")
    con.execute("SET enable_external_access = false")
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    con.execute("SET lock_configuration = true")
    return con


def _literal(text: str) -> str:
    return str(text).replace("'", "''")


def quote(name: str) -> str:
    """Return a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def one_statement(sql: str) -> str | None:
    """Return a message when sql is not exactly one statement (no `; DROP …` riders)."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as err:
        return _message(err)
    if len(statements) != 1:
        return f"expected one SQL statement, found {len(statements)}"
    return None


def _message(err: Exception) -> str:
    text = str(err).strip()
    for prefix in ("Parser Error: ", "Binder Error: ", "Catalog Error: ", "Conversion Error: "):
        text = text.replace(prefix, "")
    return text.splitlines()[0] if text else type(err).__name__


_describer: duckdb.DuckDBPyConnection | None = None
_describer_lock = threading.Lock()


def describe(tables: dict[str, pa.Schema], query: str) -> pa.Schema | str:
    """Return the Arrow schema of query over empty tables of these schemas, or the engine's message."""
    global _describer
    problem = one_statement(query)
    if problem:
        return problem
    with _describer_lock:  # one locked-down connection for every check (opening one costs ~40 ms)
        if _describer is None:
            _describer = connect()
        con = _describer.cursor()
        try:
            for name, schema in tables.items():  # DDL, not register(): that imports pandas (~1 s)
                columns = ", ".join(f"{quote(f.name)} {_type(f.type)}" for f in schema)
                con.execute(f"CREATE TEMP TABLE {quote(name)} ({columns})")
            result = con.sql(query).to_arrow_table()
        except duckdb.Error as err:
            return _message(err)
        finally:
            for name in tables:
                con.execute(f"DROP TABLE IF EXISTS {quote(name)}")
            con.close()
    try:
        return dataset_schema(result.schema)
    except TypeError as err:
        return str(err)


_TYPES = {
    pa.string(): "VARCHAR",
    pa.int64(): "BIGINT",
    pa.float64(): "DOUBLE",
    pa.binary(): "BLOB",
    pa.bool_(): "BOOLEAN",
}


def _type(t: pa.DataType) -> str:
    """Return the engine's name of a dataset field type."""
    if pa.types.is_struct(t):
        return "STRUCT(" + ", ".join(f"{quote(f.name)} {_type(f.type)}" for f in t) + ")"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _type(t.value_type) + "[]"
    return _TYPES[t]


def stream(
    schema: pa.Schema, batches: Iterator[pa.RecordBatch], numbered: bool = False
) -> pa.RecordBatchReader:
    """Return a reader over batches, with a row number column when numbered (read once, never held)."""
    if not numbered:
        return pa.RecordBatchReader.from_batches(schema, batches)
    out = schema.append(pa.field(ROW, pa.int64(), nullable=False))

    def number() -> Iterator[pa.RecordBatch]:
        start = 0
        for batch in batches:
            rows = pa.array(range(start, start + batch.num_rows), pa.int64())
            start += batch.num_rows
            yield pa.RecordBatch.from_arrays([*batch.columns, rows], schema=out)

    return pa.RecordBatchReader.from_batches(out, number())
