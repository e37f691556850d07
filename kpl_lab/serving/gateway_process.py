"""The gateway process: predictions of every deployment on a loopback port of its own, for callers with API keys.

The Jupyter server's predict route spends as much CPU per request on tornado and Jupyter's
own handler work as the replica spends answering it; this process answers the same route,
`POST /kpl/api/deployments/NAME/predict`, with a small asyncio server
(`kpl_lab.serving.http_server`) in front of the same `Gateway` (routing table, canary split,
`X-KPL-Model-Version`, request metrics written to the catalog every `FLUSH_SECONDS`). A
caller authenticates with a deployment API key (`Authorization: Bearer kpldk_…` or
`X-KPL-API-Key`), which opens that one deployment only, or with the token of a running
single-user Jupyter server on this platform (`Authorization: token …`), which opens the
projects that server opens: each server registers the SHA-256 digest of its token in
`tokens/` (`register_server`), and a digest counts only while that server's process lives.
Under JupyterHub it takes a hub user's own API token instead (`hub_tokens`). Credentials let
in for a target are remembered until they would be checked again (a key's 2 s, the servers'
list's 2 s), so a kept-alive caller's next request goes to the replica with no digest or parse.
Metrics, request deadlines and the check whether it is still needed run every
`FLUSH_SECONDS` in a thread of their own (`_rounds`): the event loop then has no timer.

One per platform (home folder), started by the platform when a deployment is made or found
(`ensure`, called by `DeploymentService.create` and every `reconcile`: a server's background
round restarts a killed one within a round), detached like replicas' supervisors, with its
state in `<home>/gateway/`: `spec.json` (what to open), `gateway.json` (pid, start time,
port, URL) and `gateway.log`. It keeps its port across restarts, holds `running.lock` while
it runs (a second one waits for the first to end) and exits on its own once no deployment is
left — unless `keep.json` names a process that still runs (the platform service under
JupyterHub, whose proxy route and health check want it there from the start).

`start.lock` orders the starter and the gateway: `ensure` decides and writes its note under
it, the gateway writes its record under it (so the note never hides the port), and the
gateway decides to exit under it, handing `gateway.json` back (`_retire`) before it lets go:
a deployment made while it exits finds no live gateway and starts the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import json
import os
import re
import signal
import sys
import threading
import time
import traceback
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import parse_qs, unquote

from ..catalog.storage import check_name
from ..engine.forkserver import PACKAGE_PARENT
from ..engine.local import start_detached
from ..engine.runfolder import is_alive, process_start_time, read_json, write_atomic
from ..errors import BadRequest, Forbidden, KPLError, ModelFailed, NotFound, Unauthorized
from . import http_server, hub_tokens
from .gateway import VERSION_HEADER, Gateway, Prediction
from .keys import digest, key_of
from .memo import Memo
from .replica import kill_group

HOST = "127.0.0.1"
FOLDER = "gateway"
ROUTE_PREFIX = "/kpl/api/deployments/"
ROUTE_SUFFIX = "/predict"
# under JupyterHub the proxy passes the service's prefix on: /services/kpl-gateway/kpl/api/...
ROUTE = re.compile(r"(?:/services/[^/]+)?/kpl/api/deployments/([^/]+)/predict")
FLUSH_SECONDS = 2.0
WORKER_THREADS = 4
MAX_BODY_BYTES = 256 * 1024 * 1024
TOKENS_SECONDS = 2.0  # a server that starts or stops is seen within this
MAX_ADMITTED = 4096  # credentials and targets let in, remembered until their credentials are checked again
PREDECESSOR_SECONDS = 60.0  # how long a new gateway waits for the one that retired to end


# the platform's side


def folder(home: str | Path) -> Path:
    """Return the folder holding the gateway process's state."""
    return Path(home) / FOLDER


def state(home: str | Path) -> dict | None:
    """Return the running gateway's gateway.json (pid, port, url), or None when none runs."""
    found = read_json(folder(home) / "gateway.json")
    if not found or not is_alive(found.get("pid"), found.get("pid_start")):
        return None
    return found


def kept(where: Path) -> bool:
    """Say whether the process the gateway is kept for (keep.json) still runs."""
    keeper = read_json(where / "keep.json") or {}
    return is_alive(keeper.get("pid"), keeper.get("start"))


def url(home: str | Path) -> str | None:
    """Return the base URL of the running gateway (`http://127.0.0.1:PORT`), or None."""
    found = state(home)
    return found.get("url") if found and found.get("port") else None


@contextlib.contextmanager
def _start_lock(where: Path):
    """Hold `start.lock`: whether a gateway runs, and its record, change only under it."""
    with open(where / "start.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def ensure(platform, port: int = 0, keep_for: dict | None = None) -> bool:
    """Start the gateway process unless it runs; return whether it was started.

    `port`: the port to listen on (0: the one it had before, else a free one).
    `keep_for`: a process (`pid`, `start`) while which it runs with no deployment too.
    """
    where = folder(platform.home)
    where.mkdir(parents=True, exist_ok=True)
    with _start_lock(where):  # a server and a CLI ensuring at once start one
        if keep_for is not None and read_json(where / "keep.json") != keep_for:
            write_atomic(where / "keep.json", json.dumps(keep_for), durable=False)
        before = read_json(where / "gateway.json") or {}
        if is_alive(before.get("pid"), before.get("pid_start")):
            return False
        spec = {
            "home": platform.home,
            "storage_url": platform.storage_url,
            "database_url": platform.database_url,
            "port": port or before.get("port") or before.get("wanted_port") or 0,
        }
        write_atomic(where / "spec.json", json.dumps(spec), durable=False)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_PARENT, env.get("PYTHONPATH")) if p)
        argv = [sys.executable, "-m", "kpl_lab.serving.gateway_process", str(where)]
        started = start_detached(argv, where / "gateway.log", "the gateway process", env)
        # its pid at once (so the next round does not start another); port and URL once it listens
        note = {
            "pid": started["pid"],
            "pid_start": started["start"],
            "port": None,
            "wanted_port": spec["port"],
        }
        write_atomic(where / "gateway.json", json.dumps(note), durable=False)
        return True


def stop(home: str | Path, grace: float) -> bool:
    """Stop the running gateway process (SIGTERM, SIGKILL after `grace` seconds); return whether one ran."""
    found = state(home)
    if found is None:
        return False
    kill_group(found["pid"], found.get("pid_start"), grace, lambda pid, start, number: os.kill(pid, number))
    return True


def register_server(home: str | Path, token: str, projects: list[str]) -> Path:
    """Let the gateway process take this server's token (its digest only); return the file to remove at exit."""
    where = folder(home) / "tokens"
    where.mkdir(parents=True, exist_ok=True, mode=0o700)
    pid, start = os.getpid(), process_start_time(os.getpid())
    entry = {"pid": pid, "pid_start": start, "digest": digest(token), "projects": projects}
    path = where / f"{pid}.json"
    write_atomic(path, json.dumps(entry), durable=False)
    path.chmod(0o600)
    return path


# the process


class GatewayApp:
    """Answer predict requests with deployment API keys over a `Gateway` of the platform."""

    def __init__(self, platform) -> None:
        self.platform = platform
        self.service = platform.deployments
        self.pool = ThreadPoolExecutor(max_workers=WORKER_THREADS, thread_name_prefix="kpl-gateway")
        self.gateway = Gateway(self.service, self.pool)
        self.keys = self.service.keys
        self._servers: dict[str, list[str]] = {}  # token digest -> projects, of live servers
        self._servers_read = 0.0
        # (API key, Authorization, target) -> (until, project, deployment) of predictions let in lately
        self._admitted: Memo[tuple[str | None, str | None, str], tuple[float, str, str]] = Memo(MAX_ADMITTED)
        self.hub = hub_tokens.from_environment(platform.default_project)

    def handle(
        self, request: http_server.Request
    ) -> http_server.Response | Awaitable[http_server.Response] | None:
        """Answer one request: a prediction, GET /health, or the error in the REST API's `Error` shape.

        A prediction whose caller, routing table and replica connection are all in memory is
        sent at once and answered from the replica's callback (None); any other goes in a task.
        """
        headers = request.headers
        content_type = headers.get("content-type") or "application/octet-stream"
        if request.method == "POST" and not content_type.startswith("multipart/form-data"):
            # the same credentials for the same target were let in lately: no parse, digest or lookup
            credentials = (headers.get("x-kpl-api-key"), headers.get("authorization"), request.target)
            admitted = self._admitted.get(credentials)
            try:
                if admitted is None or admitted[0] < time.monotonic():
                    admitted = self._admit(request, credentials)
                if admitted is not None:

                    def done(outcome: Prediction | Exception) -> None:
                        request.respond(
                            _response(outcome) if type(outcome) is Prediction else _error_response(outcome)
                        )

                    _, project, name = admitted
                    if self.gateway.predict_now(project, name, request.body, content_type, headers.get, done):
                        return None
            except Exception as error:
                return _error_response(error)
        return self._answer(request)

    async def _answer(self, request: http_server.Request) -> http_server.Response:
        try:
            return await self._handle(request)
        except Exception as error:
            return _error_response(error)

    def _admit(
        self, request: http_server.Request, credentials: tuple[str | None, str | None, str]
    ) -> tuple[float, str, str] | None:
        """Return (until, project, deployment) for a prediction known from memory, None when it needs a lookup.

        It is remembered until its credentials would be checked again (a key's cache, the list of
        servers' tokens), so a revoked key or a stopped server's token is refused as soon as before.
        """
        path, _, query = request.target.partition("?")
        route = ROUTE.fullmatch(path)
        if route is None:
            return None
        name = unquote(route[1])
        found = self._project_in_memory(request, name, _asked_project(query))
        if found is None:
            return None
        project, until = found
        return self._admitted.remember(credentials, (until, project, name))

    async def _handle(self, request: http_server.Request) -> http_server.Response:
        path, _, query = request.target.partition("?")
        if path.endswith("/health"):
            return http_server.json_response(200, {"state": "ready"})
        route = ROUTE.fullmatch(path)
        if route is None:
            raise NotFound(
                f"no such route: {path} (the gateway answers POST {ROUTE_PREFIX}NAME{ROUTE_SUFFIX})"
            )
        name = unquote(route[1])
        if request.method != "POST":
            message = f"{request.method} is not allowed: POST a body to predict"
            return http_server.json_response(405, _error("HTTPError", message), [("Allow", "POST")])
        asked = _asked_project(query)
        found = self._project_in_memory(request, name, asked)
        project = found[0] if found is not None else await self._project_looked_up(request, name, asked)
        body, content_type = _payload(request)
        return _response(await self.gateway.predict(project, name, body, content_type, request.header))

    def _project_in_memory(
        self, request: http_server.Request, name: str, asked: str | None
    ) -> tuple[str, float] | None:
        """Return the project the caller may predict in and until when that holds (monotonic time).

        None when that needs a lookup; raise when refused.
        """
        key = key_of(request.header)
        if key is not None:
            remembered = self.keys.remembered(key)
            if remembered is None:
                return None
            until, owner = remembered
            return _project_of_key(owner, name, asked), until
        if self.hub is not None:  # under JupyterHub: a hub user's own API token, asked of the hub
            return None
        return self._project_of_token(request.header("Authorization"), asked), self._servers_read

    async def _project_looked_up(self, request: http_server.Request, name: str, asked: str | None) -> str:
        """Return the project of a key from the catalog, or of a hub user's token from the hub."""
        key = key_of(request.header)
        if key is None:
            return await self.hub.project(request.header("Authorization"), asked)
        owner = await asyncio.get_running_loop().run_in_executor(self.pool, self.keys.find, key)
        if owner is None:
            raise Forbidden("this deployment key is unknown or revoked")
        return _project_of_key(owner, name, asked)

    def _project_of_token(self, authorization: str | None, asked: str | None) -> str:
        """Return the project a Jupyter server's token opens for this request; refuse anything else."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() not in ("token", "bearer") or not token.strip():
            raise Unauthorized(
                "send a deployment API key (Authorization: Bearer kpldk_… or X-KPL-API-Key; "
                "`kpl-lab deployment key create NAME`) or your Jupyter server's token (Authorization: token …)"
            )
        if time.monotonic() > self._servers_read:
            self._servers = _live_servers(folder(self.platform.home) / "tokens")
            self._servers_read = time.monotonic() + TOKENS_SECONDS
        projects = self._servers.get(digest(token.strip()))
        if projects is None:
            raise Forbidden("this token is not the token of a running Jupyter server of this platform")
        project = asked or self.platform.default_project
        check_name(project, "project")
        if projects and project not in projects:
            raise Forbidden(f"project {project!r}: you may not use this project", field="project")
        return project

    def any_deployment(self) -> bool:
        """Say whether the platform has a deployment left (none: this process is not needed)."""
        from sqlalchemy import select

        from ..catalog.deployments import Deployment

        with self.platform.session() as session:
            return session.scalar(select(Deployment.id).limit(1)) is not None

    def close(self) -> None:
        """Write the metrics counted so far; close connections and the database."""
        self.gateway.close()
        self.pool.shutdown(wait=True)
        self.platform.close()


def _live_servers(where: Path) -> dict[str, list[str]]:
    """Return token digest -> projects of the registered Jupyter servers that still run."""
    found = {}
    for path in where.glob("*.json") if where.is_dir() else ():
        with contextlib.suppress(OSError, ValueError, KeyError):
            entry = json.loads(path.read_text())
            if is_alive(entry["pid"], entry["pid_start"]):
                found[entry["digest"]] = list(entry["projects"])
    return found


def _asked_project(query: str) -> str | None:
    """Return the project a request's query names (`?project=P`), or None."""
    return parse_qs(query).get("project", [None])[0] if query else None


def _project_of_key(owner: tuple[str, str], name: str, asked: str | None) -> str:
    """Return the project of a key's deployment; refuse a key of another deployment or project."""
    project, deployment = owner
    if deployment != name or (asked is not None and asked != project):
        raise Forbidden(f"this key is for deployment {deployment!r} only")
    return project


def _response(prediction: Prediction) -> http_server.Response:
    """Return the answer to a prediction: the replica's JSON, or the model's error in the `Error` shape."""
    if prediction.status >= 400:
        error = (ModelFailed if prediction.status >= 500 else BadRequest)(_model_error(prediction.body))
        version = [(VERSION_HEADER, prediction.model_version)]
        return http_server.json_response(min(prediction.status, 502), error.to_json(), version)
    return http_server.Response(prediction.status, prediction.body, _answer_headers(prediction.model_version))


@functools.lru_cache(maxsize=1024)
def _answer_headers(version: str) -> tuple[tuple[str, str], ...]:
    """Return the headers of a prediction's answer (one tuple per version: the server keeps its head)."""
    return (("Content-Type", "application/json"), (VERSION_HEADER, version))


def _error_response(error: Exception) -> http_server.Response:
    """Return the answer to a failure: a KPLError's status and body, else 500 (the trace goes to gateway.log)."""
    if isinstance(error, KPLError):
        headers = [("WWW-Authenticate", "Bearer")] if error.status == 401 else []
        return http_server.json_response(error.status, error.to_json(), headers)
    traceback.print_exception(error)
    message = "internal error of the gateway process (see <home>/gateway/gateway.log)"
    return http_server.json_response(500, _error("InternalError", message))


def _payload(request: http_server.Request) -> tuple[bytes, str]:
    """Return the body and content type a replica gets: a multipart form's first file, else the body."""
    content_type = request.header("Content-Type") or "application/octet-stream"
    if not content_type.startswith("multipart/form-data"):
        return request.body, content_type
    from .forms import form_file  # tornado's form parser: only for a form

    return form_file(content_type, request.body)


def _error(kind: str, message: str) -> dict:
    """Return the REST API's `Error` body for a failure that is no KPLError."""
    return {"error": kind, "message": message, "field": None, "errors": []}


def _model_error(body: bytes) -> str:
    try:
        return str(json.loads(body).get("error") or "the model failed")
    except (ValueError, AttributeError):
        return "the model failed"


async def run(where: Path) -> None:
    """Serve until SIGTERM, or until no deployment is left; write metrics every FLUSH_SECONDS (`_rounds`)."""
    from ..platform import Platform

    lock = open(where / "running.lock", "w")  # noqa: SIM115 - held for the process's life
    if not _lock_within(lock, PREDECESSOR_SECONDS):  # one that retired ends within it; another runs on
        print("kpl_lab: another gateway process runs for this platform; this one exits", file=sys.stderr)
        return
    spec = json.loads((where / "spec.json").read_text())
    platform = Platform(
        home=spec["home"],
        storage_url=spec["storage_url"],
        database_url=spec["database_url"],
    )
    app = GatewayApp(platform)
    try:
        server = await http_server.serve(app.handle, HOST, spec["port"], MAX_BODY_BYTES)
    except OSError:  # the port it had is taken now: another one
        server = await http_server.serve(app.handle, HOST, 0, MAX_BODY_BYTES)
    port = server.sockets[0].getsockname()[1]
    pid = os.getpid()
    record = {"pid": pid, "pid_start": process_start_time(pid), "port": port, "url": f"http://{HOST}:{port}"}
    with _start_lock(where):  # after the starter's note, never before it
        write_atomic(where / "gateway.json", json.dumps(record), durable=False)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stopping.set)
    loop.add_signal_handler(signal.SIGINT, stopping.set)
    stopped = threading.Event()
    rounds = threading.Thread(
        target=_rounds, args=(app, where, port, loop, stopping, stopped), name="kpl-gateway-rounds"
    )
    rounds.start()
    try:
        await stopping.wait()
    finally:
        stopped.set()
        await loop.run_in_executor(None, rounds.join)
        server.close()
        with contextlib.suppress(Exception):
            app.close()


def _lock_within(lock, seconds: float) -> bool:
    """Take an exclusive flock on `lock` within `seconds`; return whether it was taken."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)


def _needed(app: GatewayApp, where: Path) -> bool:
    """Say whether a deployment is left or a process keeps this gateway."""
    return kept(where) or app.any_deployment()


def _retire(app: GatewayApp, where: Path, port: int) -> bool:
    """Hand gateway.json back (its port kept for the next one) unless needed after all; return whether it did."""
    with _start_lock(where):  # a deployment made now is in the catalog, or its `ensure` comes after this
        if _needed(app, where):
            return False
        write_atomic(where / "gateway.json", json.dumps({"wanted_port": port}), durable=False)
        return True


def _rounds(
    app: GatewayApp,
    where: Path,
    port: int,
    loop: asyncio.AbstractEventLoop,
    stopping: asyncio.Event,
    stopped: threading.Event,
) -> None:
    """Every FLUSH_SECONDS: write the metrics, end requests past their deadline, stop once not needed.

    In a thread of its own, so that the event loop has no timer: with one, every wait for the
    next request would arm a kernel timer too (about 6 µs a request; see benchmarks/README.md).
    """
    while not stopped.wait(FLUSH_SECONDS):
        loop.call_soon_threadsafe(app.gateway.sweep)
        try:
            app.gateway.flush_metrics()
            if not _needed(app, where) and _retire(app, where, port):
                break
        except Exception as error:  # the platform's folder or database is gone: nothing to serve
            print(f"kpl_lab: the gateway stops: {error!r}", file=sys.stderr)
            break
    loop.call_soon_threadsafe(stopping.set)


def main() -> None:
    """Run the gateway process of the platform whose gateway folder is argv[1]."""
    asyncio.run(run(Path(sys.argv[1])))


if __name__ == "__main__":
    main()
