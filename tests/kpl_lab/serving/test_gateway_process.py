"""The gateway process: predictions with API keys on its own port, restarted while the server runs, metrics kept."""

from __future__ import annotations

import fcntl
import http.client
import json
import os
import signal
import subprocess
import threading
import time

import pytest
from traitlets.config import Config

from kpl_lab.cli import main
from kpl_lab.engine.runfolder import is_alive, process_start_time, read_json
from kpl_lab.platform import Platform
from kpl_lab.serving import gateway_process, keys

from .conftest import toy_algorithm

WAIT = 120.0


@pytest.fixture
def deployed(kpl_server, tmp_path):
    """Deploy `alpha` (cat) in project default and `gamma` in project other, in the live server's home."""
    platform = Platform(home=str(kpl_server.home), config=Config({"Ledger": {"cpu": 16.0, "memory": 65536}}))
    algorithm = toy_algorithm(tmp_path / "toy-serve")
    refs = {}
    for project, label in (("default", "cat"), ("default", "dog"), ("other", "owl")):
        platform.catalog.add_algorithm(project, algorithm, name="toy-serve")
        (tmp_path / label).mkdir()
        (tmp_path / label / "label.txt").write_text(label)
        refs[label] = platform.catalog.add_model(project, "gated-model", tmp_path / label).ref
    service = platform.deployments
    service.create("default", "alpha", refs["cat"], algorithm="toy-serve")
    service.create("other", "gamma", refs["owl"], algorithm="toy-serve")
    try:
        service.wait("default", "alpha", WAIT)
        service.wait("other", "gamma", WAIT)
        yield platform, refs
    finally:
        service.delete("default", "alpha")
        service.delete("other", "gamma")
        platform.close()


def _gateway(home, not_pid: int | None = None) -> dict:
    """Wait for the gateway process to listen (another one than `not_pid`); return its gateway.json."""
    deadline = time.monotonic() + WAIT
    while True:
        found = gateway_process.state(home)
        if found and found.get("port") and found["pid"] != not_pid:
            return found
        assert time.monotonic() < deadline, read_json(gateway_process.folder(home) / "gateway.json")
        time.sleep(0.1)


def _call(
    connection: http.client.HTTPConnection, path: str, body: bytes = b"img", headers: dict | None = None
):
    connection.request("POST", path, body, headers or {})
    answer = connection.getresponse()
    return answer.status, answer, json.loads(answer.read() or b"null")


def test_the_gateway_process_predicts_with_a_key_and_refuses_the_rest(kpl_server, deployed, capsys):
    platform, refs = deployed
    client = kpl_server.client()
    key = client.create_deployment_key("alpha")["key"]
    gateway = _gateway(kpl_server.home)
    assert client.deployment("alpha")["gateway_url"] == (
        f"http://127.0.0.1:{gateway['port']}/kpl/api/deployments/alpha/predict"
    )
    assert main(["--home", str(kpl_server.home), "deployment", "show", "alpha"]) == 0
    assert f"gateway URL:   http://127.0.0.1:{gateway['port']}/kpl/api/deployments/alpha/predict" in (
        capsys.readouterr().out
    )
    connection = http.client.HTTPConnection("127.0.0.1", gateway["port"], timeout=60)
    path = "/kpl/api/deployments/alpha/predict"
    for credentials in ({"Authorization": f"Bearer {key}"}, {"X-KPL-API-Key": key}):
        status, answer, body = _call(connection, path, b"img-1", {**credentials, "Content-Type": "image/png"})
        assert (status, body["class_name"], answer.headers["X-KPL-Model-Version"]) == (
            200,
            "cat",
            refs["cat"],
        )
    bearer = {"Authorization": f"Bearer {key}"}
    # a multipart form: its file reaches the replica, as through the REST route
    form = (
        b'--xyz\r\nContent-Disposition: form-data; name="file"; filename="a.png"\r\n'
        b"Content-Type: image/png\r\n\r\nimg-22\r\n--xyz--\r\n"
    )
    status, _, body = _call(
        connection, path, form, {**bearer, "Content-Type": "multipart/form-data; boundary=xyz"}
    )
    assert (status, body["width"]) == (200, len(b"img-22"))
    # a chunked body on the same kept-alive connection
    connection.putrequest("POST", path)
    connection.putheader("Authorization", f"Bearer {key}")
    connection.putheader("Transfer-Encoding", "chunked")
    connection.endheaders()
    connection.send(b"3\r\nimg\r\n4\r\n-333\r\n0\r\n\r\n")
    answer = connection.getresponse()
    assert (answer.status, json.loads(answer.read())["width"]) == (200, 7)
    status, _, body = _call(connection, path, b"text", {**bearer, "Content-Type": "text/plain"})
    assert (status, body["message"]) == (400, "not an image (text/plain)")
    # without a key, with a wrong one, another deployment, another project's deployment
    status, answer, body = _call(connection, path)
    assert (status, body["error"], answer.headers["WWW-Authenticate"]) == (401, "Unauthorized", "Bearer")
    assert "X-KPL-API-Key" in body["message"]
    status, _, body = _call(connection, path, b"img", {"Authorization": f"Bearer {key[:-1]}"})
    assert (status, body["message"]) == (403, "this deployment key is unknown or revoked")
    status, _, body = _call(connection, "/kpl/api/deployments/gamma/predict?project=other", b"img", bearer)
    assert (status, body["message"]) == (403, "this key is for deployment 'alpha' only")
    status, _, body = _call(connection, path + "?project=other", b"img", bearer)
    assert status == 403
    other = client.request("POST", "deployments/gamma/keys", {"project": "other"})["key"]
    status, _, body = _call(connection, path, b"img", {"X-KPL-API-Key": other})
    assert (status, body["message"]) == (403, "this key is for deployment 'gamma' only")
    status, _, body = _call(
        connection, "/kpl/api/deployments/gamma/predict", b"img", {"X-KPL-API-Key": other}
    )
    assert (status, body["class_name"]) == (200, "owl")
    # the token of the running Jupyter server opens the projects it opens (every one here)
    token = {"Authorization": f"token {kpl_server.token}"}
    status, answer, body = _call(connection, path, b"img", token)
    assert (status, body["class_name"], answer.headers["X-KPL-Model-Version"]) == (200, "cat", refs["cat"])
    status, _, body = _call(connection, "/kpl/api/deployments/gamma/predict?project=other", b"img", token)
    assert (status, body["class_name"]) == (200, "owl")
    status, _, body = _call(connection, path, b"img", {"Authorization": f"token {kpl_server.token}x"})
    assert (status, body["message"]) == (
        403,
        "this token is not the token of a running Jupyter server of this platform",
    )
    status, _, body = _call(connection, "/kpl/api/deployments/gamma/predict", b"img", token)
    assert (status, body["error"]) == (404, "NotFound")  # project default has no gamma
    connection.request("GET", path, headers=bearer)
    answer = connection.getresponse()
    assert (answer.status, answer.headers["Allow"]) == (405, "POST")
    answer.read()
    # its requests reach the deployment's request history: 5 answered, 1 bad input
    deadline = time.monotonic() + WAIT
    while (totals := client.deployment("alpha")["totals"].get(refs["cat"])) is None or totals["requests"] < 6:
        assert time.monotonic() < deadline, client.deployment("alpha")["totals"]
        time.sleep(0.2)
    assert (totals["requests"], totals["errors"]) == (6, 1)
    # a canary: the gateway process splits as the server does and names the version
    platform.deployments.canary("default", "alpha", refs["dog"], 100, algorithm="toy-serve")
    platform.deployments.wait("default", "alpha", WAIT)
    deadline = time.monotonic() + WAIT
    while True:  # its routing table is read again within a second
        status, answer, body = _call(connection, path, b"img", bearer)
        if answer.headers["X-KPL-Model-Version"] == refs["dog"]:
            break
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert (status, body["class_name"]) == (200, "dog")
    # a key revoked by another process is refused once the gateway's memory of it ends (2 s)
    key_id = client.request("GET", "deployments/alpha/keys")["keys"][0]["id"]
    client.request("DELETE", f"deployments/alpha/keys/{key_id}")
    time.sleep(keys.CACHE_SECONDS + 0.5)
    status, _, body = _call(connection, path, b"img", bearer)
    assert (status, body["message"]) == (403, "this deployment key is unknown or revoked")
    connection.close()


def test_a_killed_gateway_process_is_restarted_by_the_running_server(kpl_server, deployed):
    _, refs = deployed
    key = kpl_server.client().create_deployment_key("alpha")["key"]
    first = _gateway(kpl_server.home)
    os.kill(first["pid"], signal.SIGKILL)
    second = _gateway(kpl_server.home, not_pid=first["pid"])
    assert not is_alive(first["pid"], first["pid_start"])
    assert second["port"] == first["port"]  # callers keep the URL they were given
    connection = http.client.HTTPConnection("127.0.0.1", second["port"], timeout=60)
    status, answer, body = _call(
        connection, "/kpl/api/deployments/alpha/predict", b"img", {"X-KPL-API-Key": key}
    )
    assert (status, body["class_name"], answer.headers["X-KPL-Model-Version"]) == (200, "cat", refs["cat"])
    connection.close()


def test_the_gateway_process_starts_with_the_first_deployment_and_ends_with_the_last(serving_platform, toy):
    home = serving_platform.home
    service = serving_platform.deployments
    assert gateway_process.state(home) is None  # no deployment, no process
    service.create(
        "default", "solo", toy("cat"), algorithm="toy-serve"
    )  # no server runs: the platform starts it
    running = _gateway(home)
    assert service.gateway_url("solo") == f"{running['url']}/kpl/api/deployments/solo/predict"
    assert service.ensure_gateway() is False  # one per platform
    service.delete("default", "solo")
    deadline = time.monotonic() + WAIT
    while is_alive(running["pid"], running["pid_start"]):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert gateway_process.state(home) is None and service.gateway_url("solo") is None


def test_a_deployment_is_created_with_its_gateway_listening(serving_platform, toy, monkeypatch):
    """`create` returns once the gateway it started listens: a caller with a key can predict at once."""
    # the replica's start is timed by WAIT, not by create's wait for the gateway
    monkeypatch.setattr("kpl_lab.serving.service.GATEWAY_START_SECONDS", WAIT)
    home = serving_platform.home
    where = gateway_process.folder(home)
    where.mkdir(parents=True)
    ref = toy("cat")
    created = []
    with open(where / "running.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # as a gateway that retires holds it: the next one waits to listen
        creating = threading.Thread(
            target=lambda: created.append(
                serving_platform.deployments.create("default", "prompt", ref, algorithm="toy-serve")
            )
        )
        creating.start()
        deadline = time.monotonic() + WAIT
        while not [d for d in serving_platform.deployments.list("default") if d.name == "prompt"]:
            assert time.monotonic() < deadline, "no deployment row"
            time.sleep(0.05)
        serving_platform.deployments.wait("default", "prompt", WAIT)  # the replica is ready meanwhile
        creating.join(2 * gateway_process.FLUSH_SECONDS)
        assert creating.is_alive() and gateway_process.url(home) is None
    creating.join(WAIT)
    assert created and created[0].name == "prompt"
    listening = gateway_process.state(home)
    assert listening is not None and listening["port"]  # no wait after `create`
    _, key = serving_platform.deployments.keys.create("default", "prompt")
    connection = http.client.HTTPConnection("127.0.0.1", listening["port"], timeout=60)
    status, _, body = _call(connection, "/kpl/api/deployments/prompt/predict", b"img", {"X-KPL-API-Key": key})
    assert (status, body["class_name"]) == (200, "cat")
    connection.close()


def test_a_deployment_made_while_the_gateway_decides_to_exit_is_served(serving_platform, toy):
    """The gateway decides to exit under start.lock: a deployment made meanwhile keeps it, or gets the next one."""
    home = serving_platform.home
    where = gateway_process.folder(home)
    keeper = subprocess.Popen(["sleep", "600"])
    keep_for = {"pid": keeper.pid, "start": process_start_time(keeper.pid)}
    assert gateway_process.ensure(serving_platform, keep_for=keep_for) is True
    running = _gateway(home)
    with open(where / "start.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # as `ensure` holds it: the gateway finds it live here
        keeper.kill()
        keeper.wait()
        time.sleep(3 * gateway_process.FLUSH_SECONDS)  # rounds that find nothing to serve
        assert is_alive(running["pid"], running["pid_start"])  # it waits to decide under the lock
        assert gateway_process.state(home) == running
    ref = toy("cat")
    service = serving_platform.deployments
    service.create("default", "late", ref, algorithm="toy-serve")
    service.wait("default", "late", WAIT)
    _, key = service.keys.create("default", "late")
    serving = _gateway(home)  # the same one, or the next one on its port: no round of a server needed
    assert serving["port"] == running["port"]
    connection = http.client.HTTPConnection("127.0.0.1", serving["port"], timeout=60)
    status, answer, body = _call(
        connection, "/kpl/api/deployments/late/predict", b"img", {"X-KPL-API-Key": key}
    )
    assert (status, body["class_name"], answer.headers["X-KPL-Model-Version"]) == (200, "cat", ref)
    connection.close()


def test_a_gateway_kept_for_a_process_runs_without_deployments_until_that_process_ends(serving_platform):
    # under JupyterHub the service keeps it: the hub waits for the kpl-gateway URL at its start
    home = serving_platform.home
    keeper = subprocess.Popen(["sleep", "600"])
    try:
        keep_for = {"pid": keeper.pid, "start": process_start_time(keeper.pid)}
        assert gateway_process.ensure(serving_platform, keep_for=keep_for) is True
        running = _gateway(home)
        time.sleep(3 * gateway_process.FLUSH_SECONDS)  # rounds that find no deployment
        assert is_alive(running["pid"], running["pid_start"])
        connection = http.client.HTTPConnection("127.0.0.1", running["port"], timeout=60)
        assert _call(connection, "/kpl/api/deployments/none/predict")[0] == 401  # it answers: no credentials
        connection.close()
    finally:
        keeper.kill()
        keeper.wait()
    deadline = time.monotonic() + WAIT
    while is_alive(running["pid"], running["pid_start"]):
        assert time.monotonic() < deadline
        time.sleep(0.1)
