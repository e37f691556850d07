"""The query engine: one SELECT per sql node, one expression per where, an engine per check and node, limits, stop."""

from __future__ import annotations

import json
import re
import threading
import time

import duckdb
import pytest

from kpl_dataset import ReadOnlyDataset
from kpl_lab.errors import BadRequest
from kpl_lab.pipelines import parse, sql
from kpl_lab.pipelines.runner import PipelineRunner
from kpl_lab.pipelines.validate import PlatformCatalog, validate

BASE = """\
version: 1
name: q
nodes:
  raw: {type: dataset, dataset: plain}
"""
PATHS = ["d/o'neil/1.jpg", "d/plain/2.jpg", "d/it's/3.png", "README"]
# rows no engine can count to: only an interrupt ends a query over them
ENDLESS = "FROM a, range(1000000000) r1, range(1000000000) r2"


@pytest.fixture
def plain(fruit):
    fruit.add("plain", [{"path": p, "contentType": "image/jpeg", "content": b"x"} for p in PATHS])


@pytest.fixture
def check(lab, plain):
    return lambda extra: validate(parse(BASE + extra), PlatformCatalog(lab, "p"))


def _problems(result) -> list[str]:
    return [str(p) for p in result.problems]


def _sql(query: str) -> str:
    return f"  pick:\n    type: sql\n    inputs: {{a: raw}}\n    query: {json.dumps(query)}\n"


def _output(lab, run, node: str) -> list[dict]:
    out = next(n for n in run.nodes if n.node == node).outputs["out"]
    return list(ReadOnlyDataset(lab.storage.absolute(out["path"]), out["part"]))


@pytest.mark.parametrize(
    "where",
    [
        "true) UNION ALL SELECT 'x', 'y', 'z' --",
        "true) UNION ALL SELECT * FROM read_csv('/etc/passwd') --",
        "true) ORDER BY (path",
        "true) LIMIT (1",
        "true) GROUP BY (path",
    ],
)
def test_a_where_that_leaves_its_expression_is_refused_naming_node_and_field(check, where):
    result = check(f"  pick: {{type: select, input: raw, where: {json.dumps(where)}}}\n")
    assert _problems(result) == [
        "line 5: pick.where: is not one expression (it closes its parenthesis or adds to the query)"
    ]


def test_a_where_reads_its_record_only(check):
    result = check(
        '  a: {type: select, input: raw, where: "path IN (SELECT path FROM input)"}\n'
        "  b: {type: select, input: raw, where: \"current_setting('temp_directory') <> ''\"}\n"
        '  c: {type: select, input: raw, where: "true; DROP TABLE input"}\n'
    )
    assert _problems(result) == [
        'line 5: a.where: reads table "input": an expression reads its record\'s fields, no table '
        "(an sql node can)",
        "line 6: b.where: function current_setting() is disabled in pipelines: it shows the server's settings",
        'line 7: c.where: syntax error at or near ";"',
    ]


def test_a_run_refuses_an_injected_where_before_it_starts(lab, plain):
    text = BASE + "  pick: {type: select, input: raw, where: \"true) UNION ALL SELECT 'x', 'y', 'z' --\"}\n"
    with pytest.raises(BadRequest) as refused:
        PipelineRunner(lab).create("p", text)
    assert refused.value.field == "pick.where" and refused.value.status == 400


def test_the_engine_writes_the_where_it_runs():
    assert sql.where_query("contentType='a''b' AND path LIKE 'd/%'", "n:x") == (
        """SELECT * FROM "n:x" WHERE ((contentType = 'a''b') AND (path ~~ 'd/%'))"""
    )
    assert sql.where_query("x) OR (y", "t", value="w") == "SELECT (x OR y) AS w FROM t"


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("CREATE TABLE t AS SELECT * FROM a", "only one SELECT runs here, not CREATE"),
        ("INSERT INTO a SELECT * FROM a", "only one SELECT runs here, not INSERT"),
        ("COPY a TO '/tmp/out.csv'", "only one SELECT runs here, not COPY"),
        ("ATTACH '/tmp/other.db' AS other", "only one SELECT runs here, not ATTACH"),
        ("PRAGMA version", "only one SELECT runs here, not PRAGMA"),
        ("SET threads = 64", "only one SELECT runs here, not SET"),
        ("CALL duckdb_settings()", "only one SELECT runs here, not CALL"),
        ("SELECT path FROM a; SELECT path FROM a", "expected one SQL statement, found 2"),
        ("SELECT * FROM read_csv('/etc/passwd')", "table function read_csv() is disabled in pipelines"),
        ("SELECT * FROM glob('/*')", "table function glob() is disabled in pipelines"),
        ("SELECT * FROM duckdb_settings()", "table function duckdb_settings() is disabled in pipelines"),
        ("SELECT * FROM query('SELECT 1')", "table function query() is disabled in pipelines"),
        ("SELECT current_setting('temp_directory') AS t", "function current_setting() is disabled"),
        ("SELECT * FROM information_schema.tables", 'reads table "information_schema.tables"'),
        ("SELECT * FROM duckdb_settings", 'reads table "duckdb_settings"'),
        ("SELECT * FROM '/etc/passwd'", 'reads table "/etc/passwd"'),
        ("SELECT * FROM b", 'reads table "b": a query reads only its inputs (a)'),
        ("SUMMARIZE a", "DESCRIBE, SHOW and SUMMARIZE cannot be used here"),
    ],
)
def test_an_sql_node_is_one_select_over_its_inputs(check, query, message):
    problems = _problems(check(_sql(query)))
    assert len(problems) == 1 and problems[0].startswith(f"line 8: pick.query: {message}"), problems


def test_an_sql_node_may_use_ctes_and_generated_rows(check):
    result = check(
        _sql("WITH c AS (SELECT path FROM a) SELECT c.path, r.range AS n FROM c, range(2) r, unnest([1]) u")
    )
    assert result.ok, _problems(result)
    assert [f["name"] for f in result.nodes["pick"].to_dict()["outputs"]["out"]["fields"]] == ["path", "n"]


def test_a_check_plans_the_query_and_never_runs_it_for_rows(check):
    result = check(_sql(f"SELECT a.path, sum(hash(r1.range + r2.range)) AS n {ENDLESS} GROUP BY a.path"))
    assert result.ok, _problems(result)


def test_each_validation_has_an_engine_of_its_own_in_the_sandbox_closed_after(check, lab, monkeypatch):
    def nowhere_here(*args, **kwargs):
        raise AssertionError("the platform's process opened a query engine")

    monkeypatch.setattr(sql, "connect", nowhere_here)  # the checks run in the project's sandboxed worker
    select = "  pick: {type: select, input: raw, where: \"path LIKE 'd/%'\"}\n"
    assert check(select).ok
    with lab.sandbox.session("p") as session:  # the worker that checked it: nothing of that check is kept
        assert session.call("kpl_lab.testing.probes:sql_checks_open") is False
    assert check(select).ok


def test_names_of_saved_entries_follow_the_catalogs_rule(check, lab, plain):
    rule = (
        "is not valid: use 1-100 ASCII letters, digits, '_', '-' or '.', starting with a letter, digit or '_'"
    )
    text = (
        "  save: {type: save_dataset, input: raw, name: ../../x}\n"
        "  m: {type: model, model: no-such}\n"
        "  keep: {type: save_model, input: m, name: a/b}\n"
        "  fine: {type: save_dataset, input: raw, name: ok-name_1.2}\n"
    )
    problems = _problems(check(text))
    assert f"line 5: save.name: name '../../x' {rule}" in problems
    assert f"line 7: keep.name: name 'a/b' {rule}" in problems
    assert not [p for p in problems if p.startswith("line 8")]
    with pytest.raises(BadRequest) as refused:
        PipelineRunner(lab).create("p", BASE + text.splitlines(keepends=True)[0])
    assert refused.value.field == "save.name"


def test_regex_patterns_and_where_literals_are_values_not_sql(lab, plain):
    # an unnamed group: the engine's regexp_extract runs it (see fuse), with the pattern as a literal
    pattern = r"(\w)'(?P<tail>[^/]*)('\) UNION ALL SELECT 1 --)?"
    text = BASE + (
        f"  ext: {{type: regex_extract, input: raw, field: path, pattern: {json.dumps(pattern)}}}\n"
        "  pick: {type: select, input: ext, where: \"tail <> 's'' x'\"}\n"
    )
    run = PipelineRunner(lab).run("p", text)
    assert run.state == "succeeded", [(n.node, n.log) for n in run.nodes]
    found = [(r["path"], r["tail"]) for r in _output(lab, run, "pick")]
    matches = [(p, m["tail"] if (m := re.search(pattern, p)) else None) for p in PATHS]
    assert (
        found
        == [(p, t) for p, t in matches if t is not None]
        == [("d/o'neil/1.jpg", "neil"), ("d/it's/3.png", "s")]
    )


def test_a_query_past_its_time_limit_fails_its_node_saying_so(lab, plain):
    text = BASE + _sql(f"SELECT sum(hash(r1.range + r2.range)) AS n {ENDLESS}")
    run = PipelineRunner(lab, query_time_limit=1).run("p", text)
    assert run.state == "failed"
    (node,) = [n for n in run.nodes if n.node == "pick"]
    assert node.state == "failed" and node.log.endswith("node pick: the query ran past its time limit of 1 s")


def stop_when_running(runner: PipelineRunner, run_id: str, node: str, stopped: list) -> threading.Thread:
    """Return a started thread that stops the run once `node` runs (its query under way), noting when."""

    def stop() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            states = {n.node: n.state for n in runner.get("p", run_id).nodes}
            if states.get(node) == "running":
                time.sleep(0.5)  # the worker is in the query by now
                stopped.append(time.monotonic())
                runner.stop("p", run_id)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=stop)
    thread.start()
    return thread


def test_a_stop_ends_a_running_query_at_once(lab, plain):
    # the time limit only ends the test if the stop did not: the node would fail instead
    runner = PipelineRunner(lab, query_time_limit=300)
    run_id = runner.create("p", BASE + _sql(f"SELECT sum(hash(r1.range + r2.range)) AS n {ENDLESS}"))
    stopped: list[float] = []
    stopper = stop_when_running(runner, run_id, "pick", stopped)
    run = runner.execute("p", run_id)
    ended = time.monotonic()
    stopper.join()
    assert run.state == "stopped"
    assert {n.node: n.state for n in run.nodes} == {"raw": "succeeded", "pick": "stopped"}
    assert ended - stopped[0] < 60  # the query over 10^18 rows was stopped, not finished
    assert not list((lab.storage.project_dir("p") / ".staging").iterdir())


def test_a_node_engine_has_its_limits_and_they_are_locked():
    con = sql.connect("64MB", None, 2)
    assert con.execute("SELECT current_setting('threads')").fetchone() == (2,)
    assert con.execute("SELECT current_setting('secret_directory')").fetchone() == ("",)  # no home folder
    with pytest.raises(duckdb.Error, match="locked"):
        con.execute("SET threads = 8")
    with pytest.raises(duckdb.Error, match="disabled"):
        con.execute("SELECT * FROM read_csv('/etc/passwd')")
    con.close()
