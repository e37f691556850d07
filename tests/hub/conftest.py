"""A real JupyterHub for the end-to-end tests: its proxy, the KPL spawner and service, a catalog on SQLite or PostgreSQL."""

from __future__ import annotations

import contextlib
import functools
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

from ..conftest import database_kinds

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

# an algorithm whose `train` holds 1 CPU until its `gate` file exists (none: at once), pushes
# training/loss 1/(step+1) for `steps` steps and saves a model: jobs and trials that end when a test says
GATED = {
    "environment.yml": """\
version: 1
image:
  runs: []
train:
  resource:
    limits:
      cpu: 1
      memory: 256
  outputs:
    - key: model
      name: gated
  cmd: python train.py
""",
    "parameter.yml": 'steps: 3\ngate: ""\n',
    "train.py": """\
import os
import time

import kpl_helper
from kpl_helper import io, metric

parameters = kpl_helper.get_parameter(default="./parameter.yml")
while parameters.gate and not os.path.exists(parameters.gate):
    time.sleep(0.1)
figure = metric.MetricFigure("training", y1_name="loss")
for step in range(parameters.steps):
    figure.push_metric(x=step, y1=1.0 / (step + 1))
with open(os.path.join(io.get_output_path(key="model", default="./out"), "weights.txt"), "w") as out:
    out.write(str(parameters.steps))
kpl_helper.done()
""",
}


def write_gated(folder: Path) -> Path:
    """Write the gated algorithm into `folder` (made) and return it."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in GATED.items():
        (folder / name).write_text(content)
    return folder


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

    def __init__(
        self,
        root: Path,
        user_python: str = "",
        account_prefix: str = USER_PREFIX,
        database_url: str | None = None,
    ) -> None:
        self.root = root
        self.database_url = database_url  # c.Platform.database_url; None: SQLite in the home
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
            + (["--database-url", self.database_url] if self.database_url else [])
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

    def _as_platform_account(self, argv: list[str]) -> subprocess.CompletedProcess:
        """Run a command as the platform's account on its Python, in the home, with the home's environment only."""
        env = {"PATH": os.environ["PATH"], "KPL_LAB_HOME": str(self.home)}
        if "PYTHONPATH" in os.environ and not self.separation:  # the tree the hub imports (our environment)
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        drop = {}
        if self.separation:
            service = self.separation.service
            drop = {"user": service.pw_uid, "group": service.pw_gid, "extra_groups": [], "umask": 0o027}
        return subprocess.run(
            [self.user_python or sys.executable, *argv],
            capture_output=True,
            text=True,
            env=env,
            timeout=DEADLINE,
            cwd=self.home,
            **drop,
        )

    def as_service(self, code: str, *args: Any) -> Any:
        """Return what Python `code` prints (JSON), run as the platform's account on its Python, e.g. on the catalog.

        Under separation the catalog and the storage are the service account's: the test's root
        process must not make files of root's among them. `code` finds `args` in `ARGS` and the
        platform's settings (its database) in `SETTINGS`: `Platform(**SETTINGS)`.
        """
        settings = {"database_url": self.database_url} if self.database_url else {}
        script = f"import json, sys\nARGS = json.loads(sys.argv[1])\nSETTINGS = {settings!r}\n{code}"
        done = self._as_platform_account(["-c", script, json.dumps(args, default=str)])
        if done.returncode != 0:
            raise AssertionError(f"as the platform's account: {done.stderr[-3000:]}")
        return json.loads(done.stdout.splitlines()[-1])

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        """Run `kpl-lab` on the hub's home and catalog, as an administrator on the hub's machine would."""
        database = ["--database-url", self.database_url] if self.database_url else []
        return self._as_platform_account(["-m", "kpl_lab.cli", "--home", str(self.home), *database, *args])

    def platform_call(self, method: str, *args: Any, result: str | None = None, **kwargs: Any) -> Any:
        """Return `Platform(home).<method path>(*args, **kwargs)` (its `result` attribute) run as the platform's account."""
        code = f"""
from kpl_lab.platform import Platform
args, kwargs = ARGS
platform = Platform(**SETTINGS)
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

    @functools.cached_property
    def admin_token(self) -> str:
        """Return an API token of the hub's admin (`admin`)."""
        return self.user_token("admin")

    def service(self, method: str, path: str, token: str, **kwargs) -> requests.Response:
        """Call the platform service (`/services/kpl/<path>`: its REST API, its admin page) as the owner of `token`."""
        with requests.Session() as session:
            return session.request(
                method,
                f"{self.url}/services/kpl/{path}",
                headers={"Authorization": f"token {token}"},
                timeout=60,
                **kwargs,
            )

    def next_whole_round(self) -> None:
        """Wait until a round of the platform's background rounds both began and ended after this call.

        The service samples the machine's use at the end of each round (the admin overview's
        `live`): the round that ends after the one ending next began after this call.
        """

        def last_round() -> float | None:
            answer = self.service("GET", "admin/api/overview", self.admin_token)
            assert answer.status_code == 200, answer.text
            return (answer.json()["live"] or {}).get("time")

        seen = last_round()
        for _ in range(2):
            seen = wait_for(lambda before=seen: (found := last_round()) != before and found, "a round")

    def browser(self, user: str) -> requests.Session:
        """Return a session logged in as `user` on the hub's login page (the dummy authenticator takes any password).

        The hub's pages (the spawn form) take its cookie, not API tokens.
        """
        session = requests.Session()
        assert session.get(f"{self.url}/hub/login", timeout=60).status_code == 200
        answer = session.post(
            f"{self.url}/hub/login",
            data={"username": user, "password": "any", "_xsrf": session.cookies["_xsrf"]},
            allow_redirects=False,
            timeout=60,
        )
        assert answer.status_code == 302, answer.text
        return session

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
platform = Platform(**SETTINGS)
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


@pytest.fixture(scope="module", params=database_kinds())
def hub_on_each_database(request, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    """Return one started hub per catalog database (SQLite, then PostgreSQL) shared by a module's tests."""
    postgres = request.getfixturevalue("postgres") if request.param == "postgresql" else None
    url = postgres.database() if postgres else None
    running = Hub(tmp_path_factory.mktemp(f"hub-{request.param}"), database_url=url)
    try:
        running.start()
        yield running
    finally:
        running.close()
        if postgres:
            postgres.drop(url)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    """Return one started hub shared by a module's tests (each test uses users and projects of its own)."""
    running = Hub(tmp_path_factory.mktemp("hub"))
    try:
        running.start()
        yield running
    finally:
        running.close()
