"""What each route of the REST API takes and answers, declared beside it in `routes.py`.

`openapi.py` writes docs/openapi.yaml from these declarations and the response models of
`kpl_lab.api`; nothing else describes the API.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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
    """One method of one route: what it takes, what it answers on success."""

    summary: str
    answer: type[BaseModel] | None  # the JSON body of a success; None when `content` says it
    status: int = 200
    description: str = ""
    query: tuple[Query, ...] = ()
    body: type[BaseModel] | dict[str, Any] | None = None  # a JSON model, or a JSON Schema of the body
    body_required: bool = False
    upload: bool = False  # the body is an archive, streamed as it is
    content: dict[str, Any] = field(default_factory=dict)  # other media types of the success answer
    project: bool = True  # takes ?project=
    job_token: bool = False  # authenticated by the job's token, not the server's
    deployment_key: bool = False  # an API key of the deployment is accepted besides the server's token
    errors: tuple[
        str, ...
    ] = ()  # error statuses besides 400, 403, 404 and 409 (keys of openapi.MORE_STATUSES)
    audit: str = ""  # the audit log's action for a success (kpl_lab.monitoring.audit), e.g. model.upload


class Route(NamedTuple):
    """A path of the API (OpenAPI form), its handler and its operations by method."""

    path: str
    handler: type
    operations: dict[str, Operation]
