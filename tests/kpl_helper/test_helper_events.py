"""The event writer: JSON encoding, the events file, and HTTP pushes to a real local server."""

from __future__ import annotations

import http.server
import json
import socket
import threading

import pytest

from kpl_helper import events, metric, ready
from kpl_helper.events import EventWriter, FileSink, HttpSink, encode


class Platform(http.server.ThreadingHTTPServer):
    """A local events endpoint recording each request; answers `status` (a list pops per request)."""

    def __init__(self, statuses: list[int] | None = None):
        self.requests: list[tuple[str, list]] = []
        self.statuses = list(statuses or [])
        super().__init__(("127.0.0.1", 0), _Handler)
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/api/jobs/42/events"

    def received(self) -> list[dict]:
        return [event for _, body in self.requests for event in body]

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        self.thread.join()


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        status = self.server.statuses.pop(0) if self.server.statuses else 200
        if status == 200:
            self.server.requests.append((self.headers["Authorization"], body))
        self.send_response(status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


@pytest.fixture
def platform():
    server = Platform()
    yield server
    server.stop()


def _free_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/events"  # nothing listens there now


def test_encode_is_always_valid_json():
    line = encode({"type": "result", "values": {"a": float("nan"), "b": [1.0, float("-inf")]}, "c": object()})
    event = json.loads(line, parse_constant=lambda name: pytest.fail(name))
    assert event["values"] == {"a": None, "b": [1.0, None]}
    assert event["raw"] == {"values.a": "nan", "values.b.1": "-inf"}
    assert event["c"].startswith("<object")
    assert "\n" not in encode({"type": "x", "text": "two\nlines"})


def test_file_sink_appends_whole_lines(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text('{"type":"ready","time":1.0}\n')
    FileSink(str(path)).send(['{"a":1}', '{"b":2}'])
    assert path.read_text().splitlines() == ['{"type":"ready","time":1.0}', '{"a":1}', '{"b":2}']


def test_file_sink_failure_keeps_events(tmp_path):
    writer = EventWriter(FileSink(str(tmp_path / "missing-folder" / "events.jsonl")))
    writer.emit({"type": "ready", "time": 1.0})
    (tmp_path / "missing-folder").mkdir()
    writer.close()
    assert json.loads((tmp_path / "missing-folder" / "events.jsonl").read_text())["type"] == "ready"


def test_http_push_with_token(job, monkeypatch, platform):
    monkeypatch.delenv("KPL_EVENTS_FILE")
    monkeypatch.setenv("KPL_EVENTS_URL", platform.url)
    monkeypatch.setenv("KPL_JOB_TOKEN", "s3cret")
    ready()
    figure = metric.MetricFigure("t", y1_name="loss")
    figure.push_metric(1, 0.5)
    events.flush()
    assert {auth for auth, _ in platform.requests} == {"token s3cret"}
    assert [e["type"] for e in platform.received()] == ["ready", "figure", "metric"]
    assert not job.events_file.exists()


def test_http_batches_large_flushes(platform, monkeypatch):
    monkeypatch.setattr(HttpSink, "max_batch", 3)
    writer = EventWriter(HttpSink(platform.url, None))
    for step in range(7):
        writer.push({"type": "metric", "x": step})
    writer.close()
    assert [len(body) for _, body in platform.requests] == [3, 3, 1]
    assert [e["x"] for e in platform.received()] == list(range(7))
    assert {auth for auth, _ in platform.requests} == {None}


def test_platform_down_never_raises_and_warns_once(capsys):
    writer = EventWriter(HttpSink(_free_port_url(), "t"))
    for step in range(3):
        writer.emit({"type": "progress", "value": step / 10})
    out = capsys.readouterr().out
    assert out.count("cannot send events") == 1
    assert len(writer._unsent) == 3


def test_platform_errors_then_recovers(capsys):
    server = Platform(statuses=[503])
    try:
        writer = EventWriter(HttpSink(server.url, "t"))
        writer.emit({"type": "ready"})
        assert server.requests == []
        writer.emit({"type": "progress", "value": 0.5})  # still backing off: only queued
        writer.close()  # the final flush retries at once
        assert [e["type"] for e in server.received()] == ["ready", "progress"]
        out = capsys.readouterr().out
        assert "answered HTTP 503" in out
        assert "reach" in out and "again" in out
    finally:
        server.stop()


def test_unsent_events_are_bounded(monkeypatch):
    monkeypatch.setattr(EventWriter, "max_unsent", 5)
    writer = EventWriter(HttpSink(_free_port_url(), None))
    writer.emit({"type": "ready"})
    for step in range(20):
        writer.push({"type": "metric", "x": step})
    writer.flush()
    assert writer.dropped == 16
    assert [json.loads(line)["x"] for line in writer._unsent] == list(range(15, 20))


def test_job_with_platform_down_exits_cleanly(job):
    code = (
        "import kpl_helper as helper\n"
        "from kpl_helper import metric\n"
        "helper.ready()\n"
        "f = metric.MetricFigure('t', y1_name='loss')\n"
        "for no in range(100):\n"
        "    f.push_metric(no, 1.0)\n"
        "helper.done()\n"
        "print('training finished')\n"
    )
    process = job.run(code, KPL_EVENTS_FILE="", KPL_EVENTS_URL=_free_port_url())
    assert process.returncode == 0, process.stderr
    assert "training finished" in process.stdout
    assert (
        process.stdout.count("103 events could not be sent") == 1
    )  # done() reports; exit does not wait again
    assert process.stderr == ""


def test_job_pushes_to_a_live_platform(job, platform):
    code = "import kpl_helper as helper\nhelper.ready()\nhelper.send_progress(0.5)\nhelper.kill()\n"
    process = job.run(code, KPL_EVENTS_FILE="", KPL_EVENTS_URL=platform.url, KPL_JOB_TOKEN="abc")
    assert process.returncode == 0, process.stderr
    assert [e["type"] for e in platform.received()] == ["ready", "progress", "stop"]
    assert {auth for auth, _ in platform.requests} == {"token abc"}


def test_inside_without_any_sink_warns(job, monkeypatch, capsys):
    monkeypatch.delenv("KPL_EVENTS_FILE")
    monkeypatch.setattr(events, "_warned_no_sink", False)
    ready()
    assert "neither KPL_EVENTS_FILE nor KPL_EVENTS_URL" in capsys.readouterr().out


def test_forked_child_does_not_resend_the_parents_queue(job):
    code = (
        "import os\n"
        "from kpl_helper import metric\n"
        "f = metric.MetricFigure('t', y1_name='loss')\n"
        "f.push_metric(1, 1.0)\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    f.push_metric(2, 2.0)\n"
        "    from kpl_helper import events\n"
        "    events.flush()\n"
        "    os._exit(0)\n"
        "os.waitpid(pid, 0)\n"
    )
    process = job.run(code)
    assert process.returncode == 0, process.stderr
    assert sorted((e["type"], e.get("x")) for e in job.events()) == [
        ("figure", None),
        ("metric", 1),
        ("metric", 2),
    ]


def test_malformed_url_never_raises(job, monkeypatch, capsys):
    monkeypatch.delenv("KPL_EVENTS_FILE")
    monkeypatch.setenv("KPL_EVENTS_URL", "not a url")
    ready()
    assert "cannot POST to 'not a url'" in capsys.readouterr().out
