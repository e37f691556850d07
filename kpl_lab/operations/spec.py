"""What each route of the REST API takes, answers and runs, declared beside it in `routes.py`.

`kpl_lab.server_ext.openapi` writes docs/openapi.yaml from these declarations and the
response models of `kpl_lab.api`; nothing else describes the API. `dispatch` reads a
request's arguments and body by them, for the REST handlers and the in-process transport.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel


@dataclass(frozen=True)
class Query:
    """A query argument."""

    name: str
    schema: dict[str, Any] | type = field(default_factory=lambda: {"type": "string"})  # or a named enum
    description: str = ""
    required: bool = False


@dataclass(frozen=True)
class Operation:
    """One method of one route: what it takes, what it answers on success, and the function that does it."""

    summary: str
    answer: type[BaseModel] | None  # the JSON body of a success; None when `content` says it
    status: int = 200
    description: str = ""
    query: tuple[Query, ...] = ()
    body: type[BaseModel] | dict[str, Any] | None = None  # a JSON model, or a JSON Schema of the body
    body_required: bool = False
    upload: bool = False  # the body is an archive (or a file to predict on), streamed as it is
    content: dict[str, Any] = field(default_factory=dict)  # other media types of the success answer
    project: bool = True  # takes ?project=
    job_token: bool = False  # authenticated by the job's token, not the server's
    deployment_key: bool = False  # an API key of the deployment is accepted besides the server's token
    errors: tuple[
        str, ...
    ] = ()  # error statuses besides 400, 403, 404 and 409 (keys of openapi.MORE_STATUSES)
    audit: str = ""  # the audit log's action for a success (kpl_lab.monitoring.audit), e.g. model.upload
    # (caller, **path and query arguments[, body=, upload=, token=]) -> a model of `kpl_lab.api` or a Raw
    run: Callable[..., Any] | None = None
    # (caller, **path and query arguments[, token=]): refuse the request before its body is read or stored
    check: Callable[..., None] | None = None
    fixed: tuple[str, ...] = ()  # body fields the request's context gives (`project`): refused in the body
    # (arguments) -> whether the work calls the project's sandbox (run on its threads, not the pool's)
    sandboxed: Callable[[dict[str, Any]], bool] | None = None


class Route(NamedTuple):
    """A path of the API (OpenAPI form), its name (`operationId`s are METHOD + name) and its operations."""

    path: str
    name: str
    operations: dict[str, Operation]


def always(arguments: dict[str, Any]) -> bool:
    """Say yes whatever the arguments (an operation that always calls the project's sandbox)."""
    return True


@dataclass
class Raw:
    """An answer that is not a JSON model: bytes, or a file sent in pieces, with its content type."""

    content: bytes | Path
    content_type: str
    headers: dict[str, str] = field(default_factory=dict)
    status: int = 200
    cleanup: Callable[[], None] | None = None  # run once the answer is sent (a file's temporary folder)

    def read(self) -> bytes:
        """Return the whole answer, then clean up after it."""
        try:
            return self.content.read_bytes() if isinstance(self.content, Path) else self.content
        finally:
            self.done()

    def done(self) -> None:
        """Clean up after the answer (once)."""
        cleanup, self.cleanup = self.cleanup, None
        if cleanup is not None:
            cleanup()
