"""The in-process transport of `kpl_lab.client.Client`: the REST API's operations run here, on a home.

`LocalTransport.open` takes what the REST transport sends (method, path, query, body) and
answers what a server would: it finds the route in the table, reads its arguments and body
with `dispatch` as the REST handlers do, runs the same operation function and hands back its
answer as bytes. Errors are the operations' own `kpl_lab.errors`. Whoever opens a home
administers it (as a single-user server's owner does); nobody logs in.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from email.message import Message
from pathlib import Path
from typing import Any

from ..catalog.storage import check_name
from ..errors import KPLError, NotFound
from . import dispatch
from .caller import API_PREFIX, Caller
from .deployments import predict
from .routes import ROUTES
from .spec import Raw
from .uploads import Upload, upload_folder


class MethodNotAllowed(KPLError):
    """The path takes other methods (405, as the server answers it)."""

    status = 405


class Answer:
    """An operation's answer as the client reads a response: `read()`, `headers`, `status`."""

    def __init__(self, raw: Raw) -> None:
        self.status = raw.status
        self.headers = Message()  # looked up without regard to case, as HTTP headers are
        self.headers["Content-Type"] = raw.content_type
        for name, value in raw.headers.items():
            self.headers[name] = value
        self._content = raw.read()

    def read(self) -> bytes:
        """Return the answer's body."""
        return self._content

    def __enter__(self) -> Answer:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def in_a_process(home: str, database_url: str | None) -> Callable[[str, str], None]:
    """Return start_run(project, run_id) that executes a recorded run in a process of its own.

    The process outlives this one (a command that does not wait for its run); its output goes
    to the run's log beside the run's files.
    """

    def start_run(project: str, run_id: str) -> None:
        from ..platform import Platform

        command = [sys.executable, "-m", "kpl_lab.cli", "--home", str(home), "--project", project]
        if database_url:
            command += ["--database-url", database_url]
        platform = Platform(home=home, **({"database_url": database_url} if database_url else {}))
        try:
            log = platform.storage.root / "pipelines" / project / "runs" / f"{run_id}.log"
        finally:
            platform.close()
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            # a shell that starts the run in the background and ends at once: the run is nobody's child here
            subprocess.run(  # noqa: S603 - our own interpreter and module
                ["/bin/sh", "-c", '"$@" &', "sh", *command, "pipeline", "execute", run_id],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                check=True,
            )

    return start_run


class LocalTransport:
    """Run the routes table's operations in this process on a platform it opened (or was given)."""

    url = "(in this process)"

    def __init__(self, platform, database_url: str | None = None, start_run=None) -> None:
        self.platform = platform
        self.start_run = start_run or in_a_process(str(platform.home), database_url)

    @classmethod
    def on_home(cls, home: str | Path | None = None, database_url: str | None = None) -> LocalTransport:
        """Open the platform of a home (default $KPL_LAB_HOME or ~/.kpl-lab) and its catalog database."""
        from ..platform import Platform

        settings = {"home": str(home) if home else None, "database_url": database_url}
        return cls(Platform(**{k: v for k, v in settings.items() if v}), database_url)

    def close(self) -> None:
        """Close the platform's database."""
        self.platform.close()

    def round(self) -> None:
        """Wake the home's host (a server, the hub's service); with none, run one round here.

        A client on a home never schedules beside a host; with none, its round decides with the
        rules in the database (docs/cli.md, "Who starts queued jobs").
        """
        from ..rounds import Rounds

        Rounds(self.platform).run_unless_hosted()

    def open(
        self,
        method: str,
        path: str,
        query: Mapping[str, str],
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> Answer:
        """Answer one request as the REST API would; raise the `kpl_lab.errors` the operation raises."""
        headers = dict(headers or {})
        found = dispatch.match(ROUTES, path)
        if found is None:
            raise NotFound(f"no such path in the KPL API: {API_PREFIX}/{path.lstrip('/')}")
        route, path_arguments = found
        operation = route.operations.get(method.lower())
        if operation is None:
            allowed = ", ".join(m.upper() for m in route.operations)
            raise MethodNotAllowed(f"{method} {API_PREFIX}{route.path}: the path takes {allowed}")
        caller = self._caller(query.get("project") if operation.project else None)
        arguments = dispatch.arguments(route, operation, path_arguments, query.get)
        if operation.job_token:
            arguments["token"] = dispatch.token_of(headers.get("Authorization", ""))
        if operation.check is not None:
            operation.check(caller, **arguments)
        upload = None
        try:
            if operation.upload:
                upload = arguments["upload"] = self._upload(body, headers)
            elif operation.body is not None:
                fixed = {name: getattr(caller, name) for name in operation.fixed}
                arguments["body"] = dispatch.body(operation, _json_bytes(body), fixed)
            result = self._run(operation.run, caller, arguments)
        finally:
            if upload is not None:
                upload.remove()
        if isinstance(result, Raw):
            return Answer(result)
        raw = dispatch.encode(result)
        raw.status = operation.status
        return Answer(raw)

    def _caller(self, project: str | None) -> Caller:
        if project is None:
            project = self.platform.default_project
        check_name(project, "project")
        return Caller(self.platform, project, is_admin=True, start_run=self.start_run)

    def _upload(self, body: Any, headers: Mapping[str, str]) -> Upload:
        """Return the body as an upload: a file in a folder of its own under the home (bytes: kept in memory)."""
        content_type = headers.get("Content-Type", "application/octet-stream")
        if isinstance(body, bytes):
            return Upload(data=body, content_type=content_type, header=headers.get)
        upload = Upload(upload_folder(self.platform.home) / "upload", content_type=content_type)
        with open(upload.path, "wb") as file:
            if body is not None:
                shutil.copyfileobj(body, file)
        return upload

    def _run(self, function, caller: Caller, arguments: dict[str, Any]) -> Any:
        if not inspect.iscoroutinefunction(function):
            return function(caller, **arguments)
        gateway = None
        if function is predict:
            from ..serving.gateway import Gateway  # through a gateway of its own

            gateway = caller.gateway = Gateway(self.platform.deployments)

        async def run() -> Any:
            try:
                return await function(caller, **arguments)
            finally:
                if gateway is not None:
                    gateway.close()

        return asyncio.run(run())


def _json_bytes(body: Any) -> bytes:
    """Return a body as the REST transport sends it: JSON text (none: empty)."""
    if body is None:
        return b""
    if isinstance(body, bytes):
        return body
    return json.dumps(body).encode()


def client_on_home(
    home: str | Path | None = None, database_url: str | None = None, project: str | None = None
):
    """Return a `kpl_lab.client.Client` that runs the API's operations in this process on a home (no server)."""
    from ..client import Client

    return Client(project=project, transport=LocalTransport.on_home(home, database_url))
