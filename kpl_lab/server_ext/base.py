"""The base of every KPL Lab API handler, and the one handler that answers the routes table's operations.

`OperationHandler` reads a request as `kpl_lab.operations.routes` declares it (path and query
arguments, the body), runs the operation's function on the extension's thread pool (or the
project's sandbox threads) and answers what it returns: a response model of `kpl_lab.api` as
JSON, or raw bytes with their content type. Errors are mapped to responses in ONE place,
`KPLHandler.write_error`: a KPLError answers its status with the `Error` model (`error`,
`message`, `field`, `errors`; a request body a model refuses is a BadRequest listing every
field at fault by dotted path), and anything else answers 500 without leaking a traceback.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from jupyter_server.base.handlers import APIHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from jupyter_server.utils import url_path_join
from pydantic import BaseModel
from tornado import web
from tornado.ioloop import IOLoop

from ..api.errors import Error
from ..catalog.storage import check_name
from ..errors import BadRequest, Forbidden, KPLError
from ..monitoring.audit import note_request
from ..monitoring.metrics import observe_request
from ..operations import dispatch
from ..operations.caller import Caller
from ..operations.pipelines import in_a_thread
from ..operations.spec import Operation, Raw, Route

if TYPE_CHECKING:
    from ..platform import Platform
    from .app import KPLLab

T = TypeVar("T")


FORWARDED_API_BASE = "X-KPL-API-Base"
FILE_CHUNK = 1 << 20  # a file answer is sent a MiB at a time


class KPLHandler(ExtensionHandlerMixin, APIHandler):
    """An API handler of the kpl_lab extension."""

    refusal = ""  # the message of the error answered, for the audit log
    audit_target = ""  # what an audited request changed, where its path and ?name= do not say it
    audit_detail: dict | None = None  # what else its audit event keeps (a quota's new value, ...)

    def on_finish(self) -> None:
        """Count the request in the metrics; queue its audit event when it changed something or looked like an attack."""
        observe_request(self)
        platform = getattr(self.app, "platform", None)
        if platform is not None:
            note_request(self, platform.audit)

    @property
    def app(self) -> KPLLab:
        """Return the extension app."""
        return self.extensionapp

    @property
    def platform(self) -> Platform:
        """Return the platform this server serves."""
        return self.app.platform

    @property
    def api_base(self) -> str:
        """Return the path the caller reaches the API at: URLs in answers (media of records) start with it.

        The platform service (settings `kpl_api_base`) answers a user's server that forwards the
        request under that server's own path (header `X-KPL-API-Base`), so its browser loads the
        media through its server with the cookie it already has.
        """
        service_base = self.settings.get("kpl_api_base")
        if service_base:
            forwarded = self.request.headers.get(FORWARDED_API_BASE, "")
            if forwarded.startswith("/") and not forwarded.startswith("//") and "?" not in forwarded:
                return forwarded
            return service_base
        return url_path_join(self.base_url, "kpl/api")

    @functools.cached_property
    def project(self) -> str:
        """Return the project of this request: `?project=` if the user may use it, else `default`."""
        name = self.get_query_argument("project", None)
        if name is None:
            name = self.platform.default_project
        check_name(name, "project")
        if not self.app.may_use_project(self.current_user, name):
            raise Forbidden(f"project {name!r}: you may not use this project", field="project")
        return name

    async def blocking(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run database or file work on the extension's thread pool, not on the event loop."""
        call = functools.partial(function, *args, **kwargs)
        return await IOLoop.current().run_in_executor(self.app.pool, call)

    def query_int(self, name: str, default: int, low: int, high: int) -> int:
        """Return an integer query argument within [low, high], or refuse it naming the argument."""
        text = self.get_query_argument(name, None)
        if text is None:  # `?limit=` is no integer: the document says so
            return default
        try:
            value = int(text)
        except ValueError:
            raise BadRequest(f"{name}: expected an integer, got {text!r}", field=name) from None
        if not low <= value <= high:
            raise BadRequest(f"{name}: must be between {low} and {high}, got {value}", field=name)
        return value

    def query_time(self, name: str) -> datetime | None:
        """Return an ISO 8601 time query argument in UTC (None when absent), or refuse it naming the argument."""
        text = self.get_query_argument(name, None)
        if not text:
            return None
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise BadRequest(
                f"{name}: expected an ISO 8601 time such as 2026-11-26T12:00:00Z, got {text!r}", field=name
            ) from None
        return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)

    def json_body(self) -> Any:
        """Return the request body parsed as JSON (an empty body is None), nesting bounded."""
        return dispatch.parse_json(self.request.body)

    def reply(self, body: BaseModel | dict, status: int = 200) -> None:
        """Answer a response model of `kpl_lab.api` as JSON (a dict only for the hub's admin page)."""
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        if isinstance(body, BaseModel):
            self.finish(body.model_dump_json(by_alias=True))
        else:
            self.finish(json.dumps(body, default=str))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Answer the `Error` model with the status of the error raised."""
        error = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(error, KPLError):
            self.set_status(error.status)
            for name, value in getattr(error, "headers", {}).items():  # a failed prediction's model version
                self.set_header(name, value)
            body = Error.model_validate(error.to_json())
            self.refusal = error.message
        elif isinstance(error, web.HTTPError):
            message = (
                error.log_message % error.args if error.log_message and error.args else error.log_message
            )
            body = Error(error="HTTPError", message=message or self._reason, field=None, errors=[])
            self.refusal = body.message
        else:
            body = Error(
                error="InternalError",
                message="internal server error (see the server log)",
                field=None,
                errors=[],
            )
        if self.get_status() == 405:  # RFC 9110: a 405 lists the methods the path takes
            self.set_header("Allow", ", ".join(self.allowed_methods()))
        self.set_header("Content-Type", "application/json")
        self.finish(body.model_dump_json())

    def allowed_methods(self) -> list[str]:
        """Return the HTTP methods this handler answers."""
        return [
            method
            for method in self.SUPPORTED_METHODS
            if getattr(type(self), method.lower()) is not getattr(web.RequestHandler, method.lower())
        ]

    def log_exception(self, typ, value, tb) -> None:  # noqa: ANN001 - tornado's signature
        """Log a person's mistake in one line; keep tracebacks for real failures."""
        if isinstance(value, KPLError):
            self.log.info("%s %s: %s", self.request.method, self.request.path, value)
            return
        super().log_exception(typ, value, tb)


class NotFoundHandler(KPLHandler):
    """Answer a path under /kpl/api/ that no route takes: 404 in the `Error` shape, for any method."""

    async def prepare(self) -> None:
        """Refuse the request before any method runs (403 first when not logged in, as elsewhere)."""
        await super().prepare()
        if self.current_user is None:
            raise web.HTTPError(403)
        raise web.HTTPError(404, "no such path in the KPL API: %s", self.request.path)


class OperationHandler(KPLHandler):
    """Answer the operations of one route of the table (`route`, set on each route's subclass)."""

    route: ClassVar[Route]

    @property
    def operation(self) -> Operation:
        """Return what the table declares for this request's method."""
        return self.route.operations[self.request.method.lower()]

    @property
    def audit_target(self) -> str:
        """Return what the operation said it changed, for the audit log ("" when it said nothing)."""
        caller = self.__dict__.get("caller")
        return caller.audit_target if caller is not None else ""

    @functools.cached_property
    def caller(self) -> Caller:
        """Return who calls, in which project (checked: 403 for a project the user may not use)."""
        return self.caller_in(self.project if self.operation.project else self.platform.default_project)

    def caller_in(self, project: str) -> Caller:
        """Return who calls, in `project`."""
        user = self.current_user
        return Caller(
            self.platform,
            project,
            user=user.username if user is not None else "",
            is_admin=self.app.is_admin(user),
            api_base=self.api_base,
            imports=self.app.imports,
            start_run=in_a_thread(self.platform),
            project_members=self.app.project_members,
        )

    def query_argument(self, name: str) -> str | None:
        """Return a query argument as tornado reads it (the last one given), or None."""
        return self.get_query_argument(name, None)

    def arguments(self, path: tuple[str, ...]) -> dict[str, Any]:
        """Return the operation's path and query arguments (and a job's token) as it declares them."""
        names = dispatch.path_names(self.route)
        found = dispatch.arguments(
            self.route, self.operation, dict(zip(names, path, strict=True)), self.query_argument
        )
        if self.operation.job_token:
            found["token"] = dispatch.token_of(self.request.headers.get("Authorization", ""))
        return found

    async def run(self, *path: str) -> None:
        """Read the request, run the operation and answer what it returns."""
        operation, arguments = self.operation, self.arguments(path)
        if operation.check is not None:
            await self.blocking(operation.check, self.caller, **arguments)
        if operation.body is not None:
            fixed = {name: getattr(self.caller, name) for name in operation.fixed}
            arguments["body"] = dispatch.body(operation, self.request.body, fixed)
        await self.answer(await self.perform(arguments))

    async def perform(self, arguments: dict[str, Any]) -> Any:
        """Run the operation's function: a coroutine here, sandboxed work on the sandbox's threads, else the pool's."""
        operation, caller = self.operation, self.caller
        call = functools.partial(operation.run, caller, **arguments)
        if inspect.iscoroutinefunction(operation.run):
            return await call()
        if operation.sandboxed is not None and operation.sandboxed(arguments):
            # the wait for the project's workers holds no thread of the server's pool
            return await self.platform.sandbox.run(caller.project, call)
        return await self.blocking(call)

    async def answer(self, result: BaseModel | Raw) -> None:
        """Answer a model as JSON with the operation's status, a raw answer as it is (a file in pieces)."""
        raw = dispatch.encode(result)
        try:
            self.set_status(raw.status if isinstance(result, Raw) else self.operation.status)
            for name, value in raw.headers.items():
                self.set_header(name, value)
            if not isinstance(raw.content, Path):
                self.finish(raw.content, set_content_type=raw.content_type)
                return
            self.set_header("Content-Type", raw.content_type)
            with open(raw.content, "rb") as file:
                while chunk := file.read(FILE_CHUNK):
                    self.write(chunk)
                    await self.flush()
            self.finish(set_content_type=raw.content_type)
        finally:
            raw.done()


def operation_method(method: str) -> Callable:
    """Return a handler method that answers the route's operation of `method`."""

    @web.authenticated
    async def answer(self: OperationHandler, *path: str) -> None:
        await self.run(*path)

    answer.__name__ = answer.__qualname__ = method
    answer.__doc__ = f"Answer {method.upper()} as the routes table declares it."
    return answer
