"""The %kpl_* magics in a real IPython shell against a running Jupyter server with KPL Lab."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import threading
import time
import uuid

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from traitlets.config import Config

from kpl_lab.arguments import parse_inputs
from kpl_lab.notebook.magics import KPLMagics, Table, typed_parameters

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


@pytest.fixture
def shell(kpl_server, kpl_data, monkeypatch):
    """Return an IPython shell with `%load_ext kpl_lab` done, finding the server through KPL_API_*."""
    monkeypatch.setenv("KPL_API_URL", kpl_server.url + "kpl/api/")
    monkeypatch.setenv("KPL_API_TOKEN", kpl_server.token)
    config = Config()
    config.HistoryManager.enabled = False
    config.HistoryManager.hist_file = ":memory:"
    # display() publishes through the shell singleton: a shell made otherwise would only print
    ipython = InteractiveShell.instance(config=config)
    ipython.run_line_magic("load_ext", "kpl_lab")
    yield ipython
    InteractiveShell.clear_instance()


def run(shell, line: str):
    """Run one cell; return (result, stdout, stderr, rich outputs)."""
    with capture_output() as captured:
        result = shell.run_cell(line)
    return result, captured.stdout, captured.stderr, captured.outputs


def test_load_ext_registers_every_magic(shell):
    names = set(shell.magics_manager.magics["line"])
    for magic in ("datasets", "algorithms", "train", "infer", "jobs", "logs", "metrics", "stop", "predict"):
        assert f"kpl_{magic}" in names


def test_datasets_and_algorithms_render_as_html_and_text(shell):
    result, _, _, outputs = run(shell, "%kpl_datasets")
    assert result.success
    html, text = outputs[0].data["text/html"], outputs[0].data["text/plain"]
    assert "<td style='text-align:left'>shapes</td>" in html and "coloured squares" in html
    assert text.splitlines()[0].split() == ["name", "newest", "versions", "records", "size", "description"]
    assert re.search(r"^shapes\s+\S+\s+1\s+6\s", text, re.M)
    _, _, _, outputs = run(shell, "%kpl_datasets -q nothing-matches-this")
    assert outputs[0].data["text/plain"] == "no datasets"

    _, _, _, outputs = run(shell, "%kpl_algorithms")
    assert re.search(r"^toy\s+\S+\s+1\s+(infer, train|train, infer)\s", outputs[0].data["text/plain"], re.M)


def test_train_wait_logs_metrics_jobs(shell):
    result, out, err, outputs = run(
        shell, "%kpl_train toy --input data=shapes --param steps=3 --param lr=0.01 --wait"
    )
    assert result.success, err
    job_id = re.match(r"submitted job (\S+) \(toy:\S+ train\): (queued|running)", out).group(1)
    assert re.search(rf"^{job_id} succeeded .*\[#+\] 100%$", out, re.M)
    assert f"job {job_id} succeeded" in out
    assert re.search(r"^output model: model:toy-model:\S+$", out, re.M)
    summary = outputs[-1].data
    assert "<td style='text-align:left'>loss</td>" in summary["text/html"]
    assert re.search(r"^loss\s+training\s+3\s+2\s+0.3333\s+0.3333\s+1\s", summary["text/plain"], re.M)

    _, out, _, _ = run(shell, f"%kpl_logs {job_id}")
    assert "lr 0.01" in out and "step 2" in out
    _, out, _, _ = run(shell, f"%kpl_logs {job_id} -f")
    assert "step 2" in out

    _, _, _, outputs = run(shell, f"%kpl_metrics {job_id}")
    assert "accuracy" in outputs[0].data["text/html"] and "accuracy" in outputs[0].data["text/plain"]

    _, _, _, outputs = run(shell, "%kpl_jobs --state succeeded")
    assert re.search(rf"^{job_id}\s+toy:\S+\s+train\s+succeeded\s+100%", outputs[0].data["text/plain"], re.M)


class Terminal(io.StringIO):
    """Standard output that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_one_status_line_redrawn_in_place(shell):
    terminal = Terminal()
    with contextlib.redirect_stdout(terminal):
        shell.run_line_magic("kpl_train", "toy --input data=shapes --param steps=3 --wait")
    submitted, status, *rest = terminal.getvalue().split("\n")
    job_id = submitted.split()[2]
    frames = status.split("\r")[1:]
    assert frames and all(frame.startswith(job_id) for frame in frames)
    assert re.match(rf"{job_id} succeeded .*100%", frames[-1])
    assert rest[0] == f"job {job_id} succeeded"


def test_infer_without_wait_returns_at_once(shell, kpl_server, wait_job_end):
    result, out, _, _ = run(shell, "%kpl_infer toy --input data=shapes")
    assert result.success
    job_id = re.match(r"submitted job (\S+) \(toy:\S+ infer\)", out).group(1)
    assert f"%kpl_logs {job_id} -f" in out
    assert wait_job_end(kpl_server.client(), job_id)["state"] == "succeeded"


def test_ctrl_c_stops_waiting_not_the_job(shell, kpl_server, wait_job_end):
    client = kpl_server.client()

    def interrupt_when_running() -> None:
        while True:
            jobs = client.jobs(state="running")
            if jobs and "step 2" in client.logs(jobs[0]["id"])["text"]:
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.1)

    interrupter = threading.Thread(target=interrupt_when_running)
    interrupter.start()
    result, out, err, _ = run(
        shell, "%kpl_train toy --input data=shapes --param steps=1000 --param pause=0.1 --wait"
    )
    interrupter.join()
    job_id = re.match(r"submitted job (\S+)", out).group(1)
    assert result.success
    assert f"stopped waiting; job {job_id} goes on" in err
    assert client.job(job_id)["state"] == "running"
    _, out, _, _ = run(shell, f"%kpl_stop {job_id}")
    assert out.startswith(f"job {job_id}: ")
    assert wait_job_end(client, job_id)["state"] == "stopped"


def _blocker(client, cpu: float) -> dict:
    """Submit a long toy job holding `cpu` CPUs; return it once it runs."""
    job = client.submit("toy", "train", {"data": "shapes"}, {"steps": 100000, "pause": 0.1}, {"cpu": cpu})
    while client.job(job["id"])["state"] != "running":
        time.sleep(0.1)
    return job


def test_wait_says_why_a_queued_job_waits(shell, kpl_server, wait_job_end):
    client = kpl_server.client()
    blocker = _blocker(client, client.devices()["capacity"]["cpu"])  # every CPU

    def stop_once_it_says_why() -> None:
        while True:
            queued = client.jobs(state="queued")
            if queued and queued[0]["queue"]:
                client.stop(blocker["id"])
                return
            time.sleep(0.1)

    stopper = threading.Thread(target=stop_once_it_says_why)
    stopper.start()
    result, out, err, _ = run(shell, "%kpl_train toy --input data=shapes --param steps=1 --wait")
    stopper.join()
    assert result.success, err
    job_id = re.match(r"submitted job (\S+) \(toy:\S+ train\): queued", out).group(1)
    assert "note:" not in out  # nothing is free now: the default stays, and it waits
    total = client.devices()["capacity"]["cpu"]
    waits = (
        f"{job_id} waits for 1 CPU (0 free of {total:g}); held by job {blocker['id']}; 1st of 1 in the queue"
    )
    assert waits in out.splitlines()
    assert f"job {job_id} succeeded" in out
    assert wait_job_end(client, blocker["id"])["state"] == "stopped"


def test_train_defaults_are_capped_to_what_is_free_now(shell, kpl_server, wait_job_end):
    client = kpl_server.client()
    total = client.devices()["capacity"]["cpu"]
    blocker = _blocker(client, total - 0.5)
    result, out, err, _ = run(shell, "%kpl_train toy --input data=shapes --param steps=1 --wait")
    client.stop(blocker["id"])
    assert result.success, err
    assert "note: cpu capped at 0.5: environment.yml asks 1 CPU, 0.5 free now" in out.splitlines()
    job_id = re.search(r"submitted job (\S+) \(toy:\S+ train\): running", out).group(1)
    assert client.job(job_id)["limits"]["cpu"] == 0.5
    assert f"job {job_id} succeeded" in out
    assert wait_job_end(client, blocker["id"])["state"] == "stopped"


def test_widgets_show_live_progress_and_curves(shell, kpl_server):
    shell.register_magics(KPLMagics(shell, use_widgets=True))
    from ipywidgets.widgets.widget import _instances

    result, _, err, outputs = run(shell, "%kpl_train toy --input data=shapes --param steps=5 --wait")
    assert result.success, err
    monitor = _instances[outputs[0].data[WIDGET_VIEW]["model_id"]]
    assert monitor.progress.state == "succeeded" and monitor.progress.bar.value == 1.0
    assert monitor.progress.bar.bar_style == "success"
    assert [x for x, _ in monitor.plot.figures["training"]["loss"]] == [0, 1, 2, 3, 4]
    assert monitor.plot.charts["training"].data[0] == [0, 1, 2, 3, 4]

    _, _, _, outputs = run(shell, "%kpl_train toy --input data=shapes --param steps=5")
    monitor = _instances[outputs[0].data[WIDGET_VIEW]["model_id"]]
    monitor.progress.poller.join()  # the background refresh ends when the job does
    monitor.plot.poller.join()
    assert monitor.progress.state == "succeeded" and len(monitor.plot.figures["training"]["loss"]) == 5


@pytest.mark.parametrize(
    ("line", "message", "usage"),
    [
        ("%kpl_train", "the following arguments are required: algorithm", True),
        ("%kpl_train toy --gpu many", "argument --gpu: invalid int value: 'many'", True),
        ("%kpl_logs 'unclosed", "No closing quotation", True),
        ("%kpl_jobs --state sleeping", "invalid choice: 'sleeping'", True),
        ("%kpl_metrics", "the following arguments are required: job", True),
        ("%kpl_train toy --input data", "expected KEY=REF", False),
        ("%kpl_train toy --input data=shapes --param nosuch=1", "nosuch: unknown parameter", False),
        ("%kpl_train toy --input data=shapes --param steps", "expected NAME=VALUE", False),
    ],
)
def test_bad_arguments_give_a_usage_message_not_a_traceback(shell, line, message, usage):
    result, out, err, _ = run(shell, line)
    assert isinstance(result.error_in_exec, UsageError)
    shown = out + err
    assert message in shown
    assert ("usage: %kpl_" in shown) == usage
    assert "Traceback" not in shown


def test_server_errors_are_one_line_with_the_field(shell):
    _, _, err, _ = run(shell, "%kpl_logs nosuchjob")
    assert err.startswith("%kpl_logs: job 'nosuchjob' not found") and len(err.strip().splitlines()) == 1
    _, _, err, _ = run(shell, "%kpl_train toy --input weights=shapes")
    assert err.startswith("%kpl_train: inputs.weights: ") and err.strip().endswith("(field inputs.weights)")
    _, _, err, _ = run(shell, "%kpl_train nosuchalgorithm")
    assert "nosuchalgorithm" in err and "Traceback" not in err


def test_arguments_are_quoted_as_in_a_shell(shell):
    _, _, err, _ = run(shell, "%kpl_logs 'no such job'")
    assert err.startswith("%kpl_logs: job 'no such job' not found")


def test_help_is_shown_without_error(shell):
    result, out, err, _ = run(shell, "%kpl_train -h")
    assert result.success and "usage: %kpl_train" in out and "--wait" in out


def test_parameters_are_typed_like_their_defaults():
    defaults = {"lr": 0.1, "steps": 3, "name": "net", "optim": {"momentum": 0.9}}
    assert typed_parameters(defaults, ["lr=0.01", "steps=7", "name=123", "optim.momentum=0.5"]) == {
        "lr": 0.01,
        "steps": 7,
        "name": "123",
        "optim.momentum": 0.5,
    }
    with pytest.raises(UsageError, match="steps"):
        typed_parameters(defaults, ["steps=many"])
    assert parse_inputs(["data=dataset:shapes:1", "model=model:net"]) == {
        "data": "dataset:shapes:1",
        "model": "model:net",
    }


def test_table_escapes_html_and_aligns_text():
    table = Table(["name", "note"], [["<b>", "数据"], ["a", None]])
    assert "<td style='text-align:left'>&lt;b&gt;</td>" in table._repr_html_()
    assert repr(table).splitlines() == ["name  note", "----  ----", "<b>   数据", "a"]


async def execute_in_server_kernel(server, code: str) -> list[dict]:
    """Start a kernel through the server's REST API, run `code` in it, return its iopub messages."""
    from tornado.httpclient import AsyncHTTPClient, HTTPRequest
    from tornado.websocket import websocket_connect

    http = AsyncHTTPClient()
    headers = {"Authorization": f"token {server.token}"}
    answer = await http.fetch(server.url + "api/kernels", method="POST", body="{}", headers=headers)
    kernel_id = json.loads(answer.body)["id"]
    messages = []
    try:
        socket = await websocket_connect(
            HTTPRequest(
                server.url.replace("http", "ws", 1) + f"api/kernels/{kernel_id}/channels", headers=headers
            )
        )
        msg_id = uuid.uuid4().hex
        header = {"msg_id": msg_id, "msg_type": "execute_request", "username": "test", "session": msg_id}
        content = {"code": code, "silent": False, "store_history": False, "allow_stdin": False}
        socket.write_message(
            json.dumps(
                {
                    "header": {**header, "version": "5.3"},
                    "parent_header": {},
                    "metadata": {},
                    "content": content,
                    "channel": "shell",
                }
            )
        )
        while True:
            message = json.loads(await socket.read_message())
            if message["channel"] != "iopub":
                continue
            if message["parent_header"].get("msg_id") != msg_id:
                if message["msg_type"] == "comm_msg":  # sent by a background thread
                    messages.append(message)
                continue
            if message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
                break
            messages.append(message)
        socket.close()
    finally:
        await http.fetch(server.url + f"api/kernels/{kernel_id}", method="DELETE", headers=headers)
    return messages


async def test_a_kernel_started_by_the_server_finds_it_and_shows_widgets(kpl_server, kpl_data):
    code = "\n".join(
        [
            "%load_ext kpl_lab",
            "import os; print(os.environ['KPL_API_URL'])",
            "%kpl_train toy --input data=shapes --param steps=3 --wait",
        ]
    )
    messages = await execute_in_server_kernel(kpl_server, code)
    errors = [m["content"] for m in messages if m["msg_type"] == "error"]
    assert not errors, errors
    printed = "".join(m["content"]["text"] for m in messages if m["msg_type"] == "stream")
    assert printed.startswith(kpl_server.url + "kpl/api")
    shown = [m["content"]["data"] for m in messages if m["msg_type"] == "display_data"]
    assert WIDGET_VIEW in shown[0]  # the job monitor, as a live widget
    updates = [m["content"]["data"].get("state", {}) for m in messages if m["msg_type"] == "comm_msg"]
    assert any(u.get("bar_style") == "success" for u in updates)  # the bar turned green when it ended
    assert any(
        sorted(u.get("series", [])) == ["accuracy", "loss"] for u in updates
    )  # the chart was drawn live


async def test_the_job_widget_refreshes_in_the_background_while_the_kernel_is_free(kpl_server, kpl_data):
    code = "\n".join(
        [
            "%load_ext kpl_lab",
            "%kpl_train toy --input data=shapes --param steps=3",
            "print('kernel free')",
            "from ipywidgets.widgets.widget import _instances",
            "from kpl_lab.widgets import JobMonitor",
            "(monitor,) = [w for w in _instances.values() if isinstance(w, JobMonitor)]",
            "monitor.progress.poller.join(); monitor.plot.poller.join()",
            "print(monitor.progress.state)",
        ]
    )
    messages = await execute_in_server_kernel(kpl_server, code)
    assert not [m["content"] for m in messages if m["msg_type"] == "error"]
    printed = "".join(m["content"]["text"] for m in messages if m["msg_type"] == "stream")
    assert printed == "kernel free\nsucceeded\n"
    updates = [m["content"]["data"].get("state", {}) for m in messages if m["msg_type"] == "comm_msg"]
    assert any(u.get("bar_style") == "success" for u in updates)
    assert any(sorted(u.get("series", [])) == ["accuracy", "loss"] for u in updates)


def test_help_of_each_magic_names_its_syntax():
    assert KPLMagics.kpl_jobs.__doc__.startswith("usage: %kpl_jobs [-h] [--state")
    assert "--input KEY=REF" in KPLMagics.kpl_infer.__doc__


PIPELINE = """\
version: 1
name: shapes-png
nodes:
  raw: {type: dataset, dataset: shapes}
  number: {type: regex_extract, input: raw, field: path, pattern: '^images/(?P<n>[0-9]+)\\.png$'}
  images: {type: select, input: number, where: "n IS NOT NULL"}
  save: {type: save_dataset, input: images, name: shapes-png}
"""


def test_pipeline_validate_run_runs(shell, tmp_path):
    file = tmp_path / "shapes.kpl-pipeline.yaml"
    file.write_text(PIPELINE)
    result, out, err, outputs = run(shell, f"%kpl_pipeline validate {file}")
    assert result.success and out.strip().endswith(f"{file}: valid"), err
    assert re.search(
        r"^number\s+regex_extract\s+out\s+path, contentType, content, n$", outputs[0].data["text/plain"], re.M
    )

    file.write_text(PIPELINE.replace("n IS NOT NULL", "m IS NOT NULL"))
    _, out, err, _ = run(shell, f"%kpl_pipeline validate {file}")
    assert f"{file}:6: images.where: Referenced column" in err and "1 problem(s)" in out

    file.write_text(PIPELINE)
    result, out, err, _ = run(shell, f"%kpl_pipeline run {file} --wait")
    assert result.success, err
    lines = out.splitlines()
    run_id = re.match(r"pipeline run (\S+) \(shapes-png\): running", lines[0]).group(1)
    assert "images: succeeded - 5 rows" in lines and lines[-1] == f"pipeline run {run_id} succeeded"

    _, _, _, outputs = run(shell, "%kpl_pipeline runs")
    assert re.search(rf"^{run_id}\s+shapes-png\s+succeeded\s+0\s+4\s", outputs[0].data["text/plain"], re.M)
    _, _, err, _ = run(shell, "%kpl_pipeline run")
    assert "needs a FILE" in err
