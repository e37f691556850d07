"""The tornado handlers of the routes table (`kpl_lab.operations.routes`), for both hosts of the API.

Every route is answered by `base.OperationHandler`, but for the methods where HTTP itself
matters: streamed uploads, a job's live log and its events, predictions (`SPECIAL`).
"""

from __future__ import annotations

from ..operations.dispatch import path_pattern
from ..operations.routes import API_PREFIX, ROUTES
from ..operations.spec import Route
from .base import NotFoundHandler, OperationHandler, operation_method
from .handlers.deployments import DeploymentPredictHandler
from .handlers.jobs import JobEventsHandler, JobLogsHandler
from .upload import DatasetUploadHandler, UploadHandler

__all__ = ["API_PREFIX", "ROUTES", "handlers", "route_handlers", "tornado_pattern"]

SPECIAL: dict[str, type[OperationHandler]] = {
    "/datasets": DatasetUploadHandler,
    "/algorithms": UploadHandler,
    "/models": UploadHandler,
    "/annotation/tasks/{name}/import": UploadHandler,
    "/jobs/{job_id}/logs": JobLogsHandler,
    "/jobs/{job_id}/events": JobEventsHandler,
    "/deployments/{name}/predict": DeploymentPredictHandler,
}


def tornado_pattern(path: str) -> str:
    """Turn `/datasets/{name}` into the tornado pattern `/kpl/api/datasets/([^/]+)/?`."""
    return f"{API_PREFIX}{path_pattern(path)}/?"


_HANDLERS: dict[str, type[OperationHandler]] = {}  # by path: both hosts of a process share them


def handler_of(route: Route) -> type[OperationHandler]:
    """Return the handler class of a route: its special class, with a method for each other operation."""
    if route.path not in _HANDLERS:
        base = SPECIAL.get(route.path, OperationHandler)
        methods = {
            method: operation_method(method)
            for method in route.operations
            if getattr(base, method) is getattr(OperationHandler, method)  # not the special class's own
        }
        _HANDLERS[route.path] = type(
            f"{route.name}Handler", (base,), {"route": route, "__module__": __name__, **methods}
        )
    return _HANDLERS[route.path]


def route_handlers() -> list[tuple[str, type]]:
    """Return (tornado pattern, handler class) of every route, in the table's order."""
    return [(tornado_pattern(route.path), handler_of(route)) for route in ROUTES]


def handlers() -> list[tuple[str, type]]:
    """Return the tornado handler list of the extension: the routes, then the JSON 404 of every other path."""
    return [*route_handlers(), (API_PREFIX + "/.*", NotFoundHandler)]
