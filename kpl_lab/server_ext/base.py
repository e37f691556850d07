"""The base of every KPL Lab API handler: the platform, the project, blocking work, and errors.

Answers go through ONE helper, `KPLHandler.reply`, which writes a response model of
`kpl_lab.api`. Errors are mapped to responses in ONE place, `KPLHandler.write_error`: a
KPLError answers its status with the `Error` model (`error`, `message`, `field`, `errors`; a
request body a model refuses is a BadRequest listing every field at fault by dotted path), and
anything else answers 500 without leaking a traceback.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TypeVar

from jupyter_server.base.handlers import APIHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from jupyter_server.utils import url_path_join
from pydantic import BaseModel, ValidationError
from tornado import web
from tornado.ioloop import IOLoop

from ..api.errors import Error
from ..catalog.storage import check_name
from ..documents import DocumentError, load_json
from ..errors import BadRequest, Forbidden, KPLError, validation_error
from ..monitoring.audit import note_request
from ..monitoring.metrics import observe_request

if TYPE_CHECKING:
    from ..platform import Platform
    from .app import KPLLab

Model = TypeVar("Model", bound=BaseModel)
T = TypeVar("T")


FORWARDED_API_BASE = "X-KPL-API-Base"
OFFSET_MAX = 2**62  # the largest `offset` a query takes (a record index or a byte of a log)


def _only_whole_floats(error: ValidationError) -> bool:
    """Say whether strict validation refused nothing but whole numbers written as floats for integers."""
    return all(
        e["type"] == "int_type" and isinstance(e["input"], float) and e["input"].is_integer()
        for e in error.errors()
    )


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

    def check_admin(self, what: str) -> None:
        """Refuse a caller who is not an administrator (the single user of a Jupyter server is)."""
        if not self.app.is_admin(self.current_user):
            raise Forbidden(f"only an administrator may {what}")

    async def sandboxed(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run work that calls the project's sandboxed workers on the sandbox's threads, not the extension's."""
        return await self.platform.sandbox.run(self.project, functools.partial(function, *args, **kwargs))

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
        if not self.request.body:
            return None
        try:
            return load_json(self.request.body)
        except DocumentError as error:
            raise BadRequest(f"the request body: {error}", field="body") from None
        except (ValueError, UnicodeDecodeError) as error:
            raise BadRequest(f"the request body is not valid JSON: {error}", field="body") from None

    def body_as(self, model: type[Model], **fixed: Any) -> Model:
        """Return the JSON body checked by a pydantic model (no body: the defaults, where the route allows it)."""
        data = self.json_body()
        if not self.request.body:
            if self.body_required():
                raise BadRequest(
                    f"the request body is required: a JSON object of {model.__name__}", field="body"
                )
            data = {}
        if not isinstance(data, dict):
            shown = json.dumps(data)
            shown = shown if len(shown) <= 40 else shown[:37] + "..."
            raise BadRequest(f"the request body must be a JSON object, got {shown}", field="body")
        for key in fixed:
            if key in data:
                raise BadRequest(f"{key}: give it in the query (?{key}=), not in the body", field=key)
        text = json.dumps({**data, **fixed})
        try:  # strict, as JSON Schema reads the document: no `false` for 0, no "1" for 1, no 1 for true
            return model.model_validate_json(text, strict=True)
        except ValidationError as error:  # the request's fault; elsewhere a ValidationError is a bug
            if not _only_whole_floats(error):
                raise validation_error(error) from None
        try:  # but 2.0 is an integer to JSON Schema, as it was to pydantic's lax reading
            return model.model_validate_json(text)
        except ValidationError as error:
            raise validation_error(error) from None

    def body_required(self) -> bool:
        """Say whether the routes table declares this request's body required."""
        from .routes import operation_of  # the routes table imports the handlers

        operation = operation_of(type(self), self.request.method)
        return operation is not None and operation.body_required

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
