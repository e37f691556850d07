"""A real JupyterHub for the end-to-end tests: its proxy, a temp SQLite file, the KPL spawner and service."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import requests

from kpl_lab.engine.identity import USER_PREFIX, ensure_system_account
from kpl_lab.hub.up import Separation, free_port, hub_environment, load_secrets, parse, render_config

DEADLINE = 120.0  # seconds: only so that a broken hub fails instead of hanging
ADMIN_SCOPES = [
    "admin:users",
    "admin:groups",
    "admin:servers",
    "admin:server_state",
    "tokens",
    "access:services",
    "list:users",
    "list:groups",
]
PROFILES = [
    {"slug": "small", "display_name": "Small", "cpu": 1, "cpu_max": 2, "memory": 512,
     "memory_max": 1024, "default": True},
    {"slug": "gpu", "display_name": "One GPU", "cpu": 1, "cpu_max": 2, "memory": 512,
     "memory_max": 1024, "accelerator": "gpu", "accelerators": 1, "accelerators_max": 1},
]  # fmt: skip
GPUS = {"gpu": [{"index": i, "name": "Declared GPU", "memory_mb": 16384} for i in range(2)]}


def wait_for(check: Callable[[], Any], what: str, deadline: float = DEADLINE) -> Any:
    """Return the first true value of check(), or fail naming what never happened."""
    end = time.monotonic() + deadline
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"{what} did not happen within {deadline:.0f} s")
        time.sleep(0.2)


class Hub:
    """A JupyterHub process on loopback with an admin API token; stopped and cleaned by the fixture.

    With `user_python` it runs as `kpl-lab up` runs it as root: the hub, its proxy and the
    platform service as a service account of the test's own (`<prefix stem>svc`), users'
    notebooks, jobs and deployments as their accounts through the privileged helper.
    """

    def __init__(self, root: Path, user_python: str = "", account_prefix: str = USER_PREFIX) -> None:
        self.root = root
        self.user_python = user_python  # given: privileges separated, as `kpl-lab up` as root
        self.account_prefix = account_prefix
        self.home = root / "home"
        (self.home / "hub").mkdir(parents=True)
        self.separation: Separation | None = None
        if user_python:
            service = ensure_system_account(account_prefix.rstrip("-") + "svc")
            self.separation = Separation(
                self.home, self.home / "storage", service, user_python, account_prefix
            )
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = secrets.token_hex(16)
        self.config = self.home / "hub" / "jupyterhub_config.py"
        self.config.write_text(self._config_text())
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"token {self.token}"
        self.proc: subprocess.Popen | None = None
        self.seen: dict[int, psutil.Process] = {}  # every process the hub started, to leave none behind
        self.starts = 0

    def _config_text(self) -> str:
        args = parse(
            ["--authenticator", "dummy", "--port", str(self.port), "--account-prefix", self.account_prefix]
        )
        creds, _ = load_secrets(self.home / "hub", "admin")
        extra = [
            f"c.KPLSpawner.profiles = {PROFILES!r}",
            f"c.Ledger.devices = {GPUS!r}",
            "c.Ledger.cpu = 16.0  # declared: more notebooks than this machine's cores, each limited to 1 CPU",
            "c.Spawner.http_timeout = 120",
            f"c.JupyterHub.services.append({{'name': 'tester', 'api_token': {self.token!r}}})",
            f"c.JupyterHub.load_roles.append({{'name': 'tester', 'services': ['tester'], 'scopes': {ADMIN_SCOPES!r}}})",
        ]
        socket = str(self.separation.socket) if self.separation else ""
        return render_config(args, self.home, creds, self.user_python, socket) + "\n".join(extra) + "\n"

    def start(self, cleanup_servers: bool = True) -> None:
        """Start the hub and wait until its API and the platform service answer."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTERHUB_", "KPL_"))}
        drop = {}
        if self.separation:  # as `kpl-lab up` does as root: the home is the service account's
            self.separation.hand_over()
            self.separation.start_helper()
            service = self.separation.service
            env = hub_environment(self.home, service)
            drop = {"user": service.pw_uid, "group": service.pw_gid, "extra_groups": [], "umask": 0o027}
        self.starts += 1
        log = open(self.root / f"hub-{self.starts}.log", "w")  # noqa: SIM115 - closed right after Popen
        with log:
            self.proc = subprocess.Popen(
                [
                    self.user_python or sys.executable,
                    "-m",
                    "jupyterhub",
                    "-f",
                    str(self.config),
                    f"--JupyterHub.cleanup_servers={cleanup_servers}",
                ],
                cwd=self.home / "hub",
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                **drop,
            )
        wait_for(lambda: self._answers("/hub/api/") == 200, "the hub API", deadline=DEADLINE)
        # the service itself answers (a service token is no user: 403), not the proxy's 503
        wait_for(lambda: self._answers("/services/kpl/api/version") in (200, 403), "the platform service")

    def _answers(self, path: str) -> int:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"the hub exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
        try:
            return self.http.get(self.url + path, timeout=10).status_code
        except requests.ConnectionError:
            return 0

    def log(self) -> str:
        """Return the log of the latest start."""
        return (self.root / f"hub-{self.starts}.log").read_text()

    def note_children(self) -> None:
        """Remember the hub's processes: notebooks, the proxy, the service."""
        if self.proc is None:
            return
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(self.proc.pid).children(recursive=True):
                self.seen.setdefault(child.pid, child)

    def stop(self) -> None:
        """Stop the hub (SIGTERM) and wait for it."""
        if self.proc is None:
            return
        self.note_children()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if self.separation:
            self.separation.stop_helper()

    def as_service(self, code: str, *args: Any) -> Any:
        """Return what Python `code` prints (JSON), run as the platform's account on its Python, e.g. on the catalog.

        Under separation the catalog and the storage are the service account's: the test's root
        process must not make files of root's among them. `code` finds `args` in `ARGS`.
        """
        script = f"import json, sys\nARGS = json.loads(sys.argv[1])\n{code}"
        env = {"PATH": os.environ["PATH"], "KPL_LAB_HOME": str(self.home)}
        drop = {}
        if self.separation:
            service = self.separation.service
            drop = {"user": service.pw_uid, "group": service.pw_gid, "extra_groups": [], "umask": 0o027}
        done = subprocess.run(
            [self.user_python or sys.executable, "-c", script, json.dumps(args, default=str)],
            capture_output=True,
            text=True,
            env=env,
            timeout=DEADLINE,
            cwd=self.home,
            **drop,
        )
        if done.returncode != 0:
            raise AssertionError(f"as the platform's account: {done.stderr[-3000:]}")
        return json.loads(done.stdout.splitlines()[-1])

    def platform_call(self, method: str, *args: Any, result: str | None = None, **kwargs: Any) -> Any:
        """Return `Platform(home).<method path>(*args, **kwargs)` (its `result` attribute) run as the platform's account."""
        code = f"""
from kpl_lab.platform import Platform
args, kwargs = ARGS
platform = Platform()
try:
    target = platform
    for part in {method!r}.split("."):
        target = getattr(target, part)
    value = target(*args, **kwargs)
    print(json.dumps(value if {result!r} is None else getattr(value, {result!r}), default=str))
finally:
    platform.close()
"""
        return self.as_service(code, list(args), kwargs)

    def close(self) -> None:
        """Stop the hub and whatever it left running."""
        self.stop()
        self.http.close()
        left = [p for p in self.seen.values() if _alive(p)]
        for process in left:
            with contextlib.suppress(psutil.Error):
                process.kill()
        psutil.wait_procs(left, timeout=30)

    # the hub's REST API, as the admin service `tester`

    def api(self, method: str, path: str, **kwargs) -> requests.Response:
        """Call the hub REST API."""
        return self.http.request(method, f"{self.url}/hub/api/{path}", timeout=60, **kwargs)

    def get(self, path: str, token: str) -> requests.Response:
        """GET a path through the proxy as the owner of `token`."""
        with requests.Session() as session:
            return session.get(self.url + path, headers={"Authorization": f"token {token}"}, timeout=60)

    def add_project(self, name: str, users: list[str], quota: dict) -> None:
        """Create the users and a group holding them with a quota."""
        for user in users:
            assert self.api("POST", f"users/{user}").status_code in (201, 409)
        answer = self.api("POST", f"groups/{name}", json={"users": users})
        assert answer.status_code == 201, answer.text
        self.set_quota(name, quota)

    def set_quota(self, project: str, quota: dict) -> None:
        """Replace the project's quota in its group properties, live."""
        answer = self.api("PUT", f"groups/{project}/properties", json={"kpl_quota": quota})
        assert answer.status_code == 200, answer.text

    def user_token(self, user: str) -> str:
        """Return a new API token of `user`."""
        answer = self.api("POST", f"users/{user}/tokens", json={"note": "e2e"})
        assert answer.status_code == 201, answer.text
        return answer.json()["token"]

    def spawn(self, user: str, **options) -> requests.Response:
        """Ask the hub to start the user's notebook with these user_options; return its answer."""
        self.note_children()
        return self.api("POST", f"users/{user}/server", json=options)

    def server(self, user: str) -> dict | None:
        """Return the hub's model of the user's default server (with its state), or None."""
        model = self.api("GET", f"users/{user}").json()
        return model["servers"].get("")

    def wait_ready(self, user: str) -> dict:
        """Wait until the user's notebook is ready; return the server model."""

        def ready():
            self.note_children()
            server = self.server(user)
            if server is None and self.api("GET", f"users/{user}").json().get("pending") is None:
                raise AssertionError(f"{user}'s server failed to start:\n{self.log()[-3000:]}")
            return server if server and server["ready"] else None

        return wait_for(ready, f"{user}'s notebook start")

    def reservations(self, project: str) -> list[tuple[str, str, dict]]:
        """Return (owner kind, owner id, devices) of what the project holds in the platform ledger."""
        code = """
from sqlalchemy import select
from kpl_lab.catalog.jobs import Reservation
from kpl_lab.platform import Platform
platform = Platform()
try:
    with platform.session() as session:
        query = select(Reservation).where(Reservation.project == ARGS[0]).order_by(Reservation.owner_id)
        print(json.dumps([(r.owner_kind, r.owner_id, r.devices) for r in session.scalars(query)]))
finally:
    platform.close()
"""
        return [tuple(row) for row in self.as_service(code, project)]

    def stop_server(self, user: str) -> None:
        """Stop the user's notebook and wait until it is gone."""
        answer = self.api("DELETE", f"users/{user}/server")
        assert answer.status_code in (202, 204), answer.text
        wait_for(lambda: self.server(user) is None, f"{user}'s notebook stop")


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.fixture
def make_hub(tmp_path: Path) -> Iterator[Callable[[], Hub]]:
    """Return a factory of real hubs (not started); each is stopped with all it started."""
    hubs: list[Hub] = []

    def make() -> Hub:
        hub = Hub(tmp_path / f"hub{len(hubs)}")
        hubs.append(hub)
        return hub

    yield make
    for hub in hubs:
        hub.close()


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    """Return one started hub shared by a module's tests (each test uses users and projects of its own)."""
    running = Hub(tmp_path_factory.mktemp("hub"))
    try:
        running.start()
        yield running
    finally:
        running.close()
