"""`kpl-lab up`: the generated configuration, the secrets, stopping everything, sample data, end to end."""

from __future__ import annotations

import argparse
import asyncio
import functools
import http.server
import json
import os
import pwd
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest
from sqlalchemy import create_engine
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from kpl_lab.catalog.migrate import current_revision, head_revision
from kpl_lab.hub.hublog import QuietPolling
from kpl_lab.hub.up import (
    SERVICE_START_SECONDS,
    add_sample_data,
    answers,
    configured_url,
    free_port,
    hub_own_url,
    load_secrets,
    parse,
    port_free,
    ready_probes,
    render_config,
    run_hub,
    serves,
    stop_serving,
)
from kpl_lab.platform import Platform
from kpl_lab.serving import gateway_process
from kpl_lab.serving.hub_tokens import ACCESS_SCOPE, TOKEN_ENV

DEADLINE = 120.0  # seconds: only so that a broken start fails instead of hanging
SLOWER_THAN_TORNADO = 25.0  # seconds: tornado's HTTP client gives up after 20 by default


def wait_for(check, what: str):
    """Return the first true value of check(), or fail naming what never happened."""
    deadline = time.monotonic() + DEADLINE
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {DEADLINE:.0f} s")
        time.sleep(0.2)


def test_secrets_are_private_and_kept(tmp_path):
    first, fresh = load_secrets(tmp_path, "root")
    assert fresh
    assert first["admin"] == "root"
    assert len(first["admin_password"]) >= 32  # SharedPasswordAuthenticator wants 32 characters
    assert first["admin_password"] != first["user_password"]
    assert (tmp_path / "secrets.json").stat().st_mode & 0o777 == 0o600
    again, fresh = load_secrets(tmp_path, "someone-else")
    assert (again, fresh) == (first, False)


def test_generated_config_loads_with_the_choices_made(tmp_path):
    args = parse(["--port", "8123", "--ip", "0.0.0.0", "--database-url", "sqlite:////data/kpl.sqlite"])
    creds, _ = load_secrets(tmp_path, "admin")
    path = tmp_path / "jupyterhub_config.py"
    path.write_text(render_config(args, tmp_path, creds))
    config = PyFileConfigLoader(path.name, path=str(tmp_path)).load_config()
    assert config.JupyterHub.bind_url == "http://0.0.0.0:8123/"
    assert config.JupyterHub.spawner_class == "kpl_lab.spawner.local.KPLLocalSpawner"
    assert config.SharedPasswordAuthenticator.admin_password == creds["admin_password"]
    assert config.Authenticator.admin_users == {"admin"}
    assert config.Platform.database_url == "sqlite:////data/kpl.sqlite"
    assert config.JupyterHub.load_groups["demo"]["properties"]["kpl_quota"]["cpu"] == 4
    [service, gateway] = config.JupyterHub.services
    assert service["name"] == "kpl"
    # the hub waits this long for the service, not JupyterHub's 30 s
    assert service["timeout"] == SERVICE_START_SECONDS
    assert "--Platform.database_url=sqlite:////data/kpl.sqlite" in service["command"]
    assert "access:services!service=kpl" in config.Spawner.server_token_scopes
    # the gateway process the service starts, on the port the proxy routes /services/kpl-gateway/ to
    gateway_port = int(gateway["url"].rsplit(":", 1)[1])
    assert gateway["name"] == "kpl-gateway" and "command" not in gateway
    assert (
        gateway["display"] is False and service["display"] is True
    )  # the Services menu: the admin page only
    assert config.ConfigurableHTTPProxy.command[1:3] == [
        "-m",
        "kpl_lab.hub.proxy",
    ]  # kernels' subprotocol answered
    # which checks users' API tokens with its own hub token, given to it through the service's environment
    assert len(gateway["api_token"]) == 64 and service["environment"][TOKEN_ENV] == gateway["api_token"]
    assert ACCESS_SCOPE in config.Spawner.server_token_scopes
    [user_role, _, gateway_role] = config.JupyterHub.load_roles
    assert user_role["name"] == "user" and ACCESS_SCOPE in user_role["scopes"]
    assert gateway_role == {
        "name": "kpl-gateway",
        "services": ["kpl-gateway"],
        "scopes": ["read:users:name", "read:users:groups"],
    }
    assert f"--DeploymentService.gateway_port={gateway_port}" in service["command"]
    public = f"--DeploymentService.gateway_public_url=http://{socket.gethostname()}:8123/services/kpl-gateway"
    assert public in service["command"]
    # running from the service's start: the hub waits for the URL of its route and checks it every minute
    assert "--DeploymentService.gateway_always=True" in service["command"]
    ports = {
        int(service["url"].rsplit(":", 1)[1]),
        config.JupyterHub.hub_port,
        int(config.ConfigurableHTTPProxy.api_url.rsplit(":", 1)[1]),
        gateway_port,
    }
    assert len(ports) == 4
    assert configured_url(path) == "http://0.0.0.0:8123/"


@pytest.mark.slow
async def test_the_proxy_waits_for_answers_slower_than_tornados_20_s(tmp_path):
    # the spawn page's progress stream of a notebook that starts in more than 20 s, a long upload
    args = parse(["--port", str(free_port())])
    creds, _ = load_secrets(tmp_path, "admin")
    (tmp_path / "jupyterhub_config.py").write_text(render_config(args, tmp_path, creds))
    command = PyFileConfigLoader("jupyterhub_config.py", path=str(tmp_path)).load_config()
    command = command.ConfigurableHTTPProxy.command

    class Slow(web.RequestHandler):
        async def get(self):
            await asyncio.sleep(SLOWER_THAN_TORNADO)
            self.write("done")

    backend = web.Application([(r"/.*", Slow)]).listen(0, "127.0.0.1")
    target = next(iter(backend._sockets.values())).getsockname()[1]
    port, api_port = free_port(), free_port()
    proxy = subprocess.Popen(
        [*command, "--ip", "127.0.0.1", "--port", str(port), "--api-port", str(api_port)]
        + ["--default-target", f"http://127.0.0.1:{target}"],
        env={**os.environ, "CONFIGPROXY_AUTH_TOKEN": "a-token-for-the-test"},
    )
    try:
        wait_for(lambda: not port_free("127.0.0.1", port), "the proxy listening")
        response = await AsyncHTTPClient().fetch(
            f"http://127.0.0.1:{port}/hub/api/users/admin/server/progress",
            raise_error=False,
            request_timeout=SLOWER_THAN_TORNADO + DEADLINE,
        )
        assert (response.code, response.body) == (200, b"done")
    finally:
        proxy.terminate()
        proxy.wait(timeout=DEADLINE)
        backend.stop()


def test_a_config_without_bind_url_gives_jupyterhubs_default(tmp_path):
    path = tmp_path / "jupyterhub_config.py"
    path.write_text("c = get_config()  # noqa\nc.JupyterHub.port = 9000\n")
    assert configured_url(path) == "http://127.0.0.1:9000/"


def test_unknown_authenticator_names_pass_through_as_classes(tmp_path):
    args = parse(["--authenticator", "oauthenticator.github.GitHubOAuthenticator", "--port", "1"])
    text = render_config(args, tmp_path, load_secrets(tmp_path, "admin")[0])
    assert "c.JupyterHub.authenticator_class = 'oauthenticator.github.GitHubOAuthenticator'" in text
    assert "SharedPasswordAuthenticator" not in text
    assert isinstance(args, argparse.Namespace)


FAKE_HUB = """
import os, signal, subprocess, sys, time
# a hub that starts a child in a session of its own and forgets it when stopped
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
with open(sys.argv[1] + ".tmp", "w") as out:
    out.write(str(child.pid))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
time.sleep(600)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_stops_the_hub_and_what_it_left(tmp_path, signum):
    (tmp_path / "hub.py").write_text(FAKE_HUB)
    pid_file = tmp_path / "child.pid"
    runner = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from kpl_lab.hub.up import run_hub
        sys.exit(run_hub([sys.executable, {str(tmp_path / "hub.py")!r}, {str(pid_file)!r}], Path({str(tmp_path)!r})))
        """
    )
    with subprocess.Popen([sys.executable, "-c", runner], stdout=subprocess.PIPE, text=True) as up:
        wait_for(pid_file.exists, "the fake hub's start")
        child = psutil.Process(int(pid_file.read_text()))
        hub = psutil.Process(up.pid).children()[0]
        up.send_signal(signum)
        out, _ = up.communicate(timeout=DEADLINE)
    assert up.returncode == 0
    assert "stopping JupyterHub" in out
    for process in (hub, child):
        assert not process.is_running() or process.status() == psutil.STATUS_ZOMBIE


@pytest.mark.slow
def test_sample_data_is_registered_once_in_demo(tmp_path, capsys):
    home = tmp_path / "home"
    assert add_sample_data(home)
    assert add_sample_data(home)  # the second run finds them
    # the numpy sample always; its PyTorch twin where jobs run torch (this Python: the test extra has it)
    said = "dataset 'digits', algorithms 'mlp-classification', 'image-classification'"
    assert said in capsys.readouterr().out
    platform = Platform(home=str(home))
    try:
        [dataset] = platform.catalog.list_datasets("demo")
        assert dataset.name == "digits"
        assert len(dataset.versions) == 1
        version = platform.catalog.get_dataset("demo", "digits")
        assert version.record_count == 1797
        names = sorted(algorithm.name for algorithm in platform.catalog.list_algorithms("demo"))
        assert names == ["image-classification", "mlp-classification"]
        assert "train" in platform.catalog.get_algorithm("demo", "mlp-classification").functions
    finally:
        platform.close()


@pytest.mark.slow
def test_without_pytorch_the_demo_has_the_numpy_sample_only(tmp_path, capsys, monkeypatch):
    from kpl_lab.hub import up

    monkeypatch.setattr(up, "runs_torch", lambda python: False)
    assert add_sample_data(tmp_path / "home")
    assert "dataset 'digits', algorithm 'mlp-classification'\n" in capsys.readouterr().out
    platform = Platform(home=str(tmp_path / "home"))
    try:
        assert [algorithm.name for algorithm in platform.catalog.list_algorithms("demo")] == [
            "mlp-classification"
        ]
    finally:
        platform.close()


async def fetch_json(url: str, **kwargs) -> tuple[int, dict | None]:
    """Return (status, parsed body) of a request; a refused connection is (0, None)."""
    try:
        response = await AsyncHTTPClient().fetch(url, raise_error=False, request_timeout=30, **kwargs)
    except (OSError, HTTPClientError):
        return 0, None
    try:
        return response.code, json.loads(response.body) if response.body else None
    except ValueError:
        return response.code, None


async def poll(url: str, what: str, **kwargs) -> tuple[int, dict | None]:
    """Return the first 200 answer of url, failing after DEADLINE."""
    deadline = time.monotonic() + DEADLINE
    while True:
        status, body = await fetch_json(url, **kwargs)
        if status == 200:
            return status, body
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: no 200 within {DEADLINE:.0f} s (last status {status})")
        await asyncio.sleep(0.3)


SLOW_HUB = """\
import http.server, pathlib, sys
port, served = int(sys.argv[1]), pathlib.Path(sys.argv[2])


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        served.write_text(self.path)
        self.send_response(200 if self.path == "/hub/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


with http.server.HTTPServer(("127.0.0.1", port), Health) as server:
    server.handle_request()
"""


def test_the_url_is_printed_once_the_hub_answers(tmp_path):
    (tmp_path / "hub.py").write_text(SLOW_HUB)
    port, served = free_port(), tmp_path / "served"
    announced = []

    def announce() -> None:
        announced.append(served.read_text())  # no such file before the hub answered

    command = [sys.executable, str(tmp_path / "hub.py"), str(port), str(served)]
    probes = (functools.partial(answers, f"http://0.0.0.0:{port}/"),)
    assert run_hub(command, tmp_path, ready=(probes, announce)) == 0
    assert announced == ["/hub/health"]


HUB_BEHIND_PROXY = """\
import http.server, pathlib, socket, sys, threading, time
own, service, proxy = (int(port) for port in sys.argv[1:4])
log = pathlib.Path(sys.argv[4])
answered = threading.Event()  # the proxy's first answer is sent: this hub may exit


def note(line):
    with log.open("a") as out:  # in the order things happened
        out.write(line + "\\n")


def handler(name):
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            note(f"{name} {self.path}")
            self.send_response(200 if self.path == "/hub/health" else 404)
            self.end_headers()
            self.wfile.flush()
            if name == "proxy":
                answered.set()

        def log_message(self, *args):
            pass

    return Health


def serve(port, name):
    threading.Thread(target=http.server.HTTPServer(("127.0.0.1", port), handler(name)).serve_forever, daemon=True).start()


def accept(listening):
    while True:
        listening.accept()[0].close()


# the proxy listens first (every probe of it before the hub's routes exist is a 404 in its log)
serve(proxy, "proxy")
time.sleep(1.0)
serve(own, "hub")
time.sleep(1.0)  # the hub starts its services, and adds the routes once they listen
listening = socket.create_server(("127.0.0.1", service))
note("service listens")
threading.Thread(target=accept, args=(listening,), daemon=True).start()
answered.wait()
"""


def test_the_proxy_is_probed_only_after_the_hubs_own_server_answers_and_its_services_listen(tmp_path):
    (tmp_path / "hub.py").write_text(HUB_BEHIND_PROXY)
    own, service, proxy, log = free_port(), free_port(), free_port(), tmp_path / "requests"
    log.touch()
    config = tmp_path / "jupyterhub_config.py"
    config.write_text(
        "c = get_config()  # noqa\n"
        f"c.JupyterHub.hub_port = {own}\n"
        f"c.JupyterHub.services = [{{'name': 'kpl', 'url': 'http://127.0.0.1:{service}'}}, {{'name': 'user'}}]\n"
    )
    announced = []
    command = [sys.executable, str(tmp_path / "hub.py"), str(own), str(service), str(proxy), str(log)]
    probes = ready_probes(config, f"http://127.0.0.1:{proxy}/")
    assert run_hub(command, tmp_path, ready=(probes, lambda: announced.append(True))) == 0
    assert announced == [True]
    # no probe of the proxy before the hub could have added its routes
    before, _, after = log.read_text().partition("service listens\n")
    assert before and set(before.splitlines()) == {"hub /hub/health"}, before
    assert after.splitlines()[-1] == "proxy /hub/health" and "proxy" not in before


HUB_WHOSE_SERVICE_FAILS = """\
import sys
print("[I 10:00:00.000 JupyterHub app:1] Starting managed service kpl at http://127.0.0.1:1", flush=True)
print("ModuleNotFoundError: No module named 'sqlalchemy'", file=sys.stderr, flush=True)
print("[C 10:00:01.000 JupyterHub app:2] Service kpl exited with status 1", file=sys.stderr, flush=True)
print("[I 10:00:01.001 JupyterHub app:3] Cleaning up single-user servers...", flush=True)
sys.exit(1)
"""


def test_a_hub_that_exits_on_its_own_is_explained(tmp_path):
    (tmp_path / "hub.py").write_text(HUB_WHOSE_SERVICE_FAILS)
    runner = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from kpl_lab.hub.up import run_hub
        sys.exit(run_hub([sys.executable, {str(tmp_path / "hub.py")!r}], Path({str(tmp_path)!r})))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", runner], capture_output=True, text=True, timeout=DEADLINE, check=False
    )
    assert done.returncode == 1
    assert "Service kpl exited with status 1" in done.stderr  # the hub's log is passed on as it comes
    said = [line.removeprefix("kpl-lab up: ") for line in done.stdout.splitlines()]
    assert said[:3] == [
        "JupyterHub exited with status 1",
        "cause: Service kpl exited with status 1",
        "the last lines of its log (the platform service's and the proxy's too):",
    ]
    assert "  ModuleNotFoundError: No module named 'sqlalchemy'" in said
    assert said[-1].endswith("Cleaning up single-user servers...")


def test_a_service_is_ready_once_it_answers_below_500(tmp_path):
    status = [503]

    class Loading(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(status[0])
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Loading)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/services/kpl/"
    try:
        assert not serves(url)  # loading: 503, try again
        status[0] = 302  # its own answer: sent to the admin page
        assert serves(url)
    finally:
        server.shutdown()
        server.server_close()
    assert not serves(url)  # nobody listens
    config = tmp_path / "jupyterhub_config.py"
    config.write_text(
        "c = get_config()  # noqa\n"
        "c.JupyterHub.services = [{'name': 'kpl', 'url': 'http://127.0.0.1:1', 'command': ['x']},"
        " {'name': 'kpl-gateway', 'url': 'http://127.0.0.1:2'}]\n"
    )
    probes = ready_probes(config, "http://127.0.0.1:3/")
    assert [(p.func.__name__, p.args) for p in probes] == [
        ("answers", ("http://127.0.0.1:8081/",)),
        ("listens", ("http://127.0.0.1:1",)),
        ("listens", ("http://127.0.0.1:2",)),
        ("serves", ("http://127.0.0.1:1/services/kpl/",)),  # the one the hub starts: loaded
        ("answers", ("http://127.0.0.1:3/",)),
    ]


@pytest.mark.slow
def test_stopping_up_stops_the_deployments_replicas_and_gateway_until_the_next_start(tmp_path, capsys):
    from kpl_lab.engine.runfolder import is_alive
    from kpl_lab.serving import replicas

    from ..serving.conftest import toy_algorithm

    home = tmp_path / "home"
    config = Config({"Ledger": {"cpu": 4.0, "memory": 8192}})
    platform = Platform(home=str(home), config=config)
    try:
        platform.catalog.add_algorithm("default", toy_algorithm(tmp_path / "toy"), name="toy-serve")
        (tmp_path / "model").mkdir()
        (tmp_path / "model" / "label.txt").write_text("cat")
        model = platform.catalog.add_model("default", "toy-model", tmp_path / "model").ref
        platform.deployments.create("default", "pets", model, algorithm="toy-serve")
        platform.deployments.wait("default", "pets", DEADLINE)
        (row,) = platform.deployments.get("default", "pets").replica_rows
        gateway = wait_for(lambda: gateway_process.state(home), "the gateway's start")
        stop_serving(
            home, parse(["--home", str(home)]), sys.executable, None
        )  # as `kpl-lab up` does once its hub ended
        assert not replicas.supervised(row.handle)
        assert not is_alive(gateway["pid"], gateway["pid_start"])
        assert "stopped the gateway and 1 replica(s) of deployments" in capsys.readouterr().out
        assert platform.deployments.reconcile() == [row.id]  # the service's next start
        platform.deployments.wait("default", "pets", DEADLINE)
    finally:
        platform.deployments.delete("default", "pets")
        platform.close()


def test_the_hubs_own_url_comes_from_the_config(tmp_path):
    args = parse(["--port", str(free_port())])
    creds, _ = load_secrets(tmp_path, "admin")
    path = tmp_path / "jupyterhub_config.py"
    path.write_text(render_config(args, tmp_path, creds))
    hub_port = PyFileConfigLoader(path.name, path=str(tmp_path)).load_config().JupyterHub.hub_port
    assert hub_own_url(path) == f"http://127.0.0.1:{hub_port}/"
    path.write_text("c = get_config()  # noqa\nc.JupyterHub.hub_bind_url = 'http://10.0.0.5:9081/hub/'\n")
    assert hub_own_url(path) == "http://10.0.0.5:9081/"
    path.write_text("c = get_config()  # noqa\n")
    assert hub_own_url(path) == "http://127.0.0.1:8081/"


def test_the_services_polling_is_logged_at_debug_level_only():
    import logging

    access = logging.getLogger("kpl-test-access")
    access.setLevel(logging.INFO)
    access.addFilter(QuietPolling("kpl"))
    seen = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append((record.levelname, record.getMessage()))
    access.addHandler(handler)
    access.info("200 GET /hub/api/groups (kpl@127.0.0.1) 3.02ms")
    access.info("200 GET /hub/api/users/admin (kpl@127.0.0.1) 2.10ms")
    access.info("200 GET /hub/api/groups (admin@127.0.0.1) 3.02ms")  # a person: kept
    access.warning("403 GET /hub/api/groups (kpl@127.0.0.1) 1.00ms")  # a failure: kept
    access.info("302 GET /hub/ -> /hub/login (@127.0.0.1) 1.00ms")
    assert [level for level, _ in seen] == ["INFO", "WARNING", "INFO"]
    access.setLevel(logging.DEBUG)
    access.info("200 GET /hub/api/groups (kpl@127.0.0.1) 3.02ms")
    assert seen[-1] == ("DEBUG", "200 GET /hub/api/groups (kpl@127.0.0.1) 3.02ms")


@pytest.mark.slow
@pytest.mark.databases
async def test_kpl_lab_up_end_to_end(tmp_path, database_url, user_python, open_folder, account_prefix):
    # what an administrator types: postgresql:// (the platform picks psycopg 3)
    chosen = (
        ["--database-url", database_url.replace("postgresql+psycopg://", "postgresql://")]
        if database_url
        else []
    )
    port = free_port()
    home = open_folder / "home"  # the platform's account passes through to it (pytest's folders are root's)
    service = account_prefix.rstrip("-") + "svc"
    log_path = tmp_path / "up.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTERHUB_", "KPL_"))}
    with open(log_path, "w") as log:
        up = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kpl_lab.cli",
                "up",
                "--home",
                str(home),
                "--port",
                str(port),
                "--no-sample-data",
                *chosen,
                "--user-python",
                user_python,
                "--service-account",
                service,
                "--account-prefix",
                account_prefix,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
            env=env,
        )
    try:
        try:
            text = wait_for(
                lambda: "with password" in log_path.read_text() and log_path.read_text(), "the login line"
            )
        except AssertionError as error:
            raise AssertionError(f"{error}:\n{log_path.read_text()[-4000:]}") from None
        password = re.search(r"log in as 'admin' with password (\S+) \(shown once\)", text).group(1)
        assert (home / "hub" / "jupyterhub_config.py").exists()
        # as root: the home is the service account's, users pass through to theirs (root's folder)
        account = pwd.getpwnam(service)
        owners = {
            path: (path.stat().st_uid, path.stat().st_mode & 0o7777)
            for path in (home, home / "hub", home / "users", home / "hub" / "secrets.json")
        }
        assert owners == {
            home: (account.pw_uid, 0o711),
            home / "hub": (account.pw_uid, 0o700),
            home / "users": (0, 0o711),
            home / "hub" / "secrets.json": (account.pw_uid, 0o600),
        }
        config = (home / "hub" / "jupyterhub_config.py").read_text()
        assert f"c.KPLLocalSpawner.user_python = {user_python!r}" in config
        assert f"--Platform.helper_socket={home / 'run' / 'helper.sock'}" in config
        base = f"http://127.0.0.1:{port}"
        status, info = await fetch_json(f"{base}/hub/api/")  # it answers once the URL is printed
        assert status == 200 and info["version"]
        assert text.index("with password") > text.index("KPL Lab at")

        body = json.dumps({"auth": {"username": "admin", "password": password}, "note": "smoke test"})
        status, answer = await fetch_json(f"{base}/hub/api/users/admin/tokens", method="POST", body=body)
        assert status == 201, answer
        headers = {"Authorization": f"token {answer['token']}"}
        status, _ = await fetch_json(
            f"{base}/hub/api/users/admin/tokens",
            method="POST",
            body=json.dumps({"auth": {"username": "admin", "password": "not-it"}}),
        )
        assert status == 403

        status, version = await poll(f"{base}/services/kpl/api/version", "the platform API", headers=headers)
        assert version["name"] == "kpl-lab"
        status, overview = await fetch_json(f"{base}/services/kpl/admin/api/overview", headers=headers)
        assert status == 200, overview
        # the service has read the hub's groups (at its start, for the overview): not in the log
        assert "GET /hub/api/groups" not in log_path.read_text()
        demo = next(p for p in overview["projects"] if p["name"] == "demo")
        assert demo["members"] == ["admin"]
        assert demo["quota"]["notebooks"] == 3
        # the service keeps its catalog in the database it was given
        assert (home / "kpl.sqlite").exists() == (database_url is None)
        if database_url:
            engine = create_engine(database_url)
            try:
                with engine.connect() as conn:
                    assert current_revision(conn) == head_revision()
            finally:
                engine.dispose()

        family = [psutil.Process(up.pid), *psutil.Process(up.pid).children(recursive=True)]
        runs_as = {" ".join(p.cmdline()): p.uids().real for p in family}
        # the one root process besides `up` itself is the privileged helper; the platform is its account's
        for part, uid in (
            ("-m jupyterhub", account.pw_uid),
            ("kpl_lab.hub.proxy", account.pw_uid),
            ("kpl_lab.hub.service", account.pw_uid),
            ("kpl_lab.privileged.helper", 0),
        ):
            assert [u for line, u in runs_as.items() if part in line] == [uid], (part, runs_as)
        up.send_signal(signal.SIGTERM)
        assert up.wait(timeout=DEADLINE) == 0
        left = [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert left == [], [p.cmdline() for p in left]
        assert gateway_process.state(home) is None  # the service's gateway, detached, is stopped too
        assert (await fetch_json(f"{base}/hub/api/"))[0] == 0  # nobody listens any more
    finally:
        if up.poll() is None:  # a failure above: stop it as a user would, or its hub outlives it
            up.terminate()
            try:
                up.wait(timeout=DEADLINE)
            except subprocess.TimeoutExpired:
                up.kill()
                up.wait()


def test_a_python_without_pytorch_is_told_apart(tmp_path):
    from kpl_lab.hub.up import runs_torch

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    assert not runs_torch(str(tmp_path / "bare" / "bin" / "python"))  # kpl-lab up says: pip install ".[demo]"
    assert runs_torch(sys.executable)  # the test extra has torch
