"""The query engine: DuckDB over Arrow, with file access, extensions and settings locked.

Every validation and every node of a run has a connection of its own (nothing outlives it or is
seen by another), with a memory limit, a thread count and a time limit. What a member writes in
SQL is checked on the engine's parse tree before it runs: an `sql` node's query is one SELECT
that reads only the node's inputs, and a `where` is one expression, rendered back by the engine.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..errors import KPLError
from .schema import dataset_schema, schema_from_json, schema_json

if TYPE_CHECKING:  # imported where a query runs: the platform's process checks SQL in a sandboxed worker
    import duckdb

ROW = "__kpl_row"  # the input order of a record, added while streaming so joins keep it

# table functions a query may call: they make rows from values; the others read files, run
# text as SQL or show the server (read_csv, glob, query, duckdb_settings, pragma_…)
TABLE_FUNCTIONS = frozenset({"range", "generate_series", "unnest"})
# scalar functions that show the engine's settings (temp_directory and the like: server paths)
HIDDEN_FUNCTIONS = frozenset({"current_setting", "getvariable"})


# a check runs over empty tables and never fetches a row: a little of everything is plenty
CHECK_MEMORY, CHECK_THREADS, CHECK_SECONDS = "256MB", 1, 10


class Refused(ValueError):
    """SQL a member wrote that the engine will not run (the message says why)."""


class TimeLimit(KPLError):
    """A node's query ran past its time limit."""

    status = 422


def connect(
    memory_limit: str | None = None, temp_directory: str | None = None, threads: int = 0
) -> duckdb.DuckDBPyConnection:
    """Return an in-memory DuckDB that cannot read or write files or load extensions (spills only).

    temp_directory: where it spills (None: the engine's `.tmp`; "": nowhere); threads: 0 for one per core.
    """
    import duckdb

    con = duckdb.connect(":memory:")
    if memory_limit:
        con.execute(f"SET memory_limit = {string(memory_limit)}")
    if temp_directory is not None:
        con.execute(f"SET temp_directory = {string(temp_directory)}")
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    con.execute("SET preserve_insertion_order = true")
    # hand freed memory back to the system at once: by default the engine keeps up to 128 MiB
    # (512 MiB after a bulk free) cached per process, which pyarrow's allocations cannot reuse
    con.execute("SET allocator_flush_threshold = '1MiB'")
    con.execute("SET allocator_bulk_deallocation_flush_threshold = '1MiB'")
    con.execute("SET secret_directory = ''")  # no secrets are kept; by default it names the home folder
    con.execute("SET enable_external_access = false")
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    con.execute("SET lock_configuration = true")
    return con


def string(text: str) -> str:
    """Return a SQL string literal of text (the engine reads no escapes in '…': quotes are doubled)."""
    return "'" + str(text).replace("'", "''") + "'"


def quote(name: str) -> str:
    """Return a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def _message(err: Exception) -> str:
    text = str(err).strip()
    for prefix in ("Parser Error: ", "Binder Error: ", "Catalog Error: ", "Conversion Error: "):
        text = text.replace(prefix, "")
    return text.splitlines()[0] if text else type(err).__name__


class Watchdog:
    """Interrupt a connection's query once it runs past a time limit or a stop is asked for.

    DuckDB has no statement timeout: a thread waits beside the work and calls interrupt()
    (again every POLL seconds, so a query started after the first call is caught too).
    """

    POLL = 0.1

    def __init__(
        self, con: duckdb.DuckDBPyConnection, time_limit: float, stop: threading.Event | None = None
    ):
        self.con, self.time_limit, self.stop = con, time_limit, stop
        self.reason: str | None = None  # "stopped" or "time" once it interrupted
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="kpl-sql-watchdog", daemon=True)

    def __enter__(self) -> Watchdog:
        if self.time_limit or self.stop is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join()

    def _watch(self) -> None:
        deadline = time.monotonic() + self.time_limit if self.time_limit else None
        while not self._done.wait(self.POLL):
            if self.stop is not None and self.stop.is_set():
                self.reason = "stopped"
            elif deadline is not None and time.monotonic() >= deadline:
                self.reason = "time"
            if self.reason:
                self.con.interrupt()


class _Checks:
    """The connection of one validation, opened on first use."""

    def __init__(self) -> None:
        self.con: duckdb.DuckDBPyConnection | None = None

    def connection(self) -> duckdb.DuckDBPyConnection:
        if self.con is None:
            self.con = connect(CHECK_MEMORY, "", CHECK_THREADS)
        return self.con


_checks: ContextVar[_Checks | None] = ContextVar("kpl_sql_checks", default=None)
# where the checks of the current validation run: a sandboxed worker's session (kpl_lab.sandbox)
_remote: ContextVar[Any] = ContextVar("kpl_sql_remote", default=None)


@contextlib.contextmanager
def checking(remote: Any = None) -> Iterator[None]:
    """Give the checks inside one connection of their own, closed after: nothing outlives a validation.

    `remote`: a sandboxed worker's session (`Sandbox.session`); the checks then run there, on
    the one connection that worker keeps for the session, never in this process.
    """
    if remote is not None:
        token = _remote.set(remote)
        try:
            yield
        finally:
            _remote.reset(token)
        return
    checks = _Checks()
    token = _checks.set(checks)
    try:
        yield
    finally:
        _checks.reset(token)
        if checks.con is not None:
            checks.con.close()


def in_worker(name: str, *args: Any) -> Any:
    """Run one of the checks in a sandboxed worker, on the connection it keeps for its session (JSON answers)."""
    if _checks.get() is None:
        from ..sandbox import worker

        worker.session().enter_context(checking())
    if name == "describe":
        tables, query = args
        found = describe({table: schema_from_json(schema) for table, schema in tables.items()}, query)
        return found if isinstance(found, str) else schema_json(found)
    return {"check_select": check_select, "where_query": where_query}[name](*args)


def _routed(name: str, *args: Any) -> tuple[bool, Any]:
    """Return (True, answer) when a sandboxed session takes this check, else (False, None)."""
    remote = _remote.get()
    if remote is None:
        return False, None
    return True, remote.call(f"{__name__}:in_worker", name, *args, what="checking the pipeline's SQL")


@contextlib.contextmanager
def _checker() -> Iterator[duckdb.DuckDBPyConnection]:
    """Yield the validation's connection, or one for this check alone outside a validation."""
    checks = _checks.get()
    if checks is not None:
        yield checks.connection()
        return
    con = connect(CHECK_MEMORY, "", CHECK_THREADS)
    try:
        yield con
    finally:
        con.close()


def _parse(con: duckdb.DuckDBPyConnection, text: str) -> dict:
    """Return the engine's parse tree of one SELECT statement, or raise Refused."""
    import duckdb

    try:
        statements = con.extract_statements(text)
    except duckdb.Error as err:
        raise Refused(_message(err)) from None
    if len(statements) != 1:
        raise Refused(f"expected one SQL statement, found {len(statements)}")
    if statements[0].type != duckdb.StatementType.SELECT:
        raise Refused(f"only one SELECT runs here, not {statements[0].type.name}")
    tree = json.loads(con.execute("SELECT json_serialize_sql(?)", [text]).fetchone()[0])
    if tree.get("error"):
        raise Refused(tree.get("error_message") or "the engine cannot read it")
    return tree


def _render(con: duckdb.DuckDBPyConnection, tree: dict) -> str:
    """Return the SQL text the engine writes for a parse tree."""
    return con.execute("SELECT json_deserialize_sql(?)", [json.dumps(tree)]).fetchone()[0]


def _names(tree: object, key: str) -> Iterator[dict]:
    """Yield every mapping in a parse tree that has key."""
    if isinstance(tree, dict):
        if key in tree:
            yield tree
        for value in tree.values():
            yield from _names(value, key)
    elif isinstance(tree, list):
        for value in tree:
            yield from _names(value, key)


_TABLE_REFS = {"BASE_TABLE", "TABLE_FUNCTION", "JOIN", "SUBQUERY", "EXPRESSION_LIST", "EMPTY", "PIVOT"}


def _check_reads(tree: dict, tables: set[str], what: str) -> None:
    """Refuse a parse tree that reads anything but these tables, or a function that reads files or settings."""
    ctes = {entry["key"] for holder in _names(tree, "cte_map") for entry in holder["cte_map"]["map"]}
    for node in _names(tree, "type"):
        kind = node["type"]
        if not isinstance(kind, str) or "class" in node:
            continue
        if "alias" in node and "sample" in node and kind not in _TABLE_REFS:  # a table reference
            shown = {"SHOW_REF": "DESCRIBE, SHOW and SUMMARIZE"}.get(kind, kind)
            raise Refused(f"{shown} cannot be used here")
        if kind == "BASE_TABLE":
            name = node["table_name"]
            qualified = ".".join(p for p in (node["catalog_name"], node["schema_name"], name) if p)
            if qualified != name or name not in tables | ctes:
                raise Refused(f'reads table "{qualified}": {what}')
        elif kind == "TABLE_FUNCTION":
            name = (node.get("function") or {}).get("function_name", "")
            if name.lower() not in TABLE_FUNCTIONS:
                allowed = ", ".join(sorted(TABLE_FUNCTIONS))
                raise Refused(f"table function {name}() is disabled in pipelines (allowed: {allowed})")
    for node in _names(tree, "function_name"):
        name = str(node["function_name"]).lower()
        if name in HIDDEN_FUNCTIONS or name.startswith(("duckdb_", "pragma_")):
            raise Refused(f"function {name}() is disabled in pipelines: it shows the server's settings")


def check_select(query: str, tables: list[str]) -> None:
    """Refuse a query that is not one SELECT reading only these tables (by the engine's parser, not text)."""
    if _routed("check_select", query, list(tables))[0]:
        return
    with _checker() as con:
        tree = _parse(con, query)
    _check_reads(tree, set(tables), f"a query reads only its inputs ({', '.join(tables)})")


_SHAPE = "SELECT * FROM input WHERE (true)"


def _condition(con: duckdb.DuckDBPyConnection, where: str) -> dict:
    """Return the tree of `SELECT * FROM input WHERE (where)` once it is exactly that, where one expression."""
    tree = _parse(con, f"SELECT * FROM input WHERE ({where})")
    shape = _parse(con, _SHAPE)
    found, expected = tree["statements"][0], shape["statements"][0]
    if found["named_param_map"] or {**found["node"], "where_clause": None} != {
        **expected["node"],
        "where_clause": None,
    }:
        raise Refused("is not one expression (it closes its parenthesis or adds to the query)")
    reads = "an expression reads its record's fields, no table (an sql node can)"
    _check_reads(found["node"]["where_clause"], set(), reads)
    return tree


def where_query(where: str, table: str, value: str | None = None) -> str:
    """Return `SELECT * FROM table WHERE <where>`, or `SELECT (<where>) AS value FROM table`.

    The engine writes it from the parse tree of where (checked as one expression): the text
    a member wrote is never pasted into a query.
    """
    routed, answer = _routed("where_query", where, table, value)
    if routed:
        return answer
    with _checker() as con:
        tree = _condition(con, where)
        node = tree["statements"][0]["node"]
        node["from_table"] |= {"table_name": table, "qualified_name": {"path": [table]}}
        if value is not None:
            node["select_list"] = [{**node["where_clause"], "alias": value}]
            node["where_clause"] = None
        return _render(con, tree)


def describe(tables: dict[str, pa.Schema], query: str) -> pa.Schema | str:
    """Return the Arrow schema of query over empty tables of these schemas, or the engine's message.

    The query is bound and planned, never run for rows (LIMIT 0), under the check limits.
    """
    routed, answer = _routed(
        "describe", {name: schema_json(schema) for name, schema in tables.items()}, query
    )
    if routed:
        return answer if isinstance(answer, str) else schema_from_json(answer)
    import duckdb

    with _checker() as con:
        cursor = con.cursor()  # its temporary tables are its own and go with it
        try:
            for name, schema in tables.items():  # DDL, not register(): that imports pandas (~1 s)
                columns = ", ".join(f"{quote(f.name)} {_type(f.type)}" for f in schema)
                cursor.execute(f"CREATE TEMP TABLE {quote(name)} ({columns})")
            with Watchdog(cursor, CHECK_SECONDS) as watch:
                try:
                    result = cursor.sql(query).limit(0).to_arrow_table()
                except duckdb.Error as err:
                    if watch.reason:
                        return f"checking it ran past its time limit of {CHECK_SECONDS:g} s"
                    return _message(err)
        except duckdb.Error as err:
            return _message(err)
        finally:
            for name in tables:
                cursor.execute(f"DROP TABLE IF EXISTS {quote(name)}")
            cursor.close()
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
