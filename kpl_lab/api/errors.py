"""The body of every error answer (400, 403, 404, 409, 500)."""

from __future__ import annotations

from pydantic import Field

from .base import Body


class FieldError(Body):
    """One problem with one field of the request."""

    field: str = Field(description="dotted path of the field at fault, e.g. `parameters.steps`")
    message: str


class Error(Body):
    """What went wrong; a refused request names every field at fault."""

    error: str = Field(
        description="BadRequest (400), Forbidden (403), NotFound (404), Conflict (409), "
        "HTTPError or InternalError (500)"
    )
    message: str
    field: str | None = Field(description="the first field at fault (dotted path), or null")
    errors: list[FieldError] = Field(description="every field at fault, in the order found")
