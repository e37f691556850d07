"""The errors every part of the platform raises; REST handlers map them to HTTP statuses."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class KPLError(Exception):
    """A problem a person can act on; `status` is the HTTP status it maps to.

    `field` is the dotted path of the first field at fault; `errors` lists every
    (field, message) at fault when there are several (a refused form, parameters).
    """

    status = 500

    def __init__(
        self, message: str, *, field: str | None = None, errors: Iterable[tuple[str, str]] = ()
    ) -> None:
        super().__init__(message)
        self.message = message
        self.errors = list(errors)
        if field is None and self.errors:
            field = self.errors[0][0]
        self.field = field
        if not self.errors and field is not None:
            self.errors = [(field, message)]

    def to_json(self) -> dict:
        """Return the error as the body of an API response (the `Error` model of kpl_lab.api.errors)."""
        return {
            "error": type(self).__name__,
            "message": self.message,
            "field": self.field,
            "errors": [{"field": field, "message": message} for field, message in self.errors],
        }


class BadRequest(KPLError):
    """The request itself is wrong (a bad name, a malformed reference, an invalid file)."""

    status = 400


class Unauthorized(KPLError):
    """The caller did not say who it is (no credentials)."""

    status = 401


class Forbidden(KPLError):
    """The caller may not do this."""

    status = 403


class NotFound(KPLError):
    """No such object in this project (another project's objects are not found either)."""

    status = 404


class Conflict(KPLError):
    """The object is in a state that forbids the change (e.g. used by a running job)."""

    status = 409


class ModelFailed(KPLError):
    """A deployed model failed on a request (its server answered 5xx or died on it)."""

    status = 502


class Unavailable(KPLError):
    """The server cannot take this now (e.g. too many imports waiting); trying later may work."""

    status = 503


def field_path(location: Iterable[Any]) -> str:
    """Return a dotted field path (`parameters.steps`, `resources.cpu`) of a location."""
    return ".".join(str(part) for part in location)


def invalid(problems: list[tuple[str, str]], what: str = "the request") -> BadRequest:
    """Return the BadRequest that lists every (field, message) at fault."""
    lines = [f"{field}: {message}" if field else message for field, message in problems]
    if len(lines) == 1:
        return BadRequest(lines[0], errors=problems)
    return BadRequest(f"{len(lines)} problems in {what}: " + "; ".join(lines), errors=problems)


def validation_error(error: Any) -> BadRequest:
    """Return the BadRequest that lists every field a pydantic model refused, by dotted path."""
    return invalid([(field_path(e.get("loc", ())), e.get("msg", "invalid value")) for e in error.errors()])


def parameter_error(error: Any) -> BadRequest:
    """Return the BadRequest that lists every problem of an algorithm's ParameterError under `parameters`."""
    return invalid(
        [
            (field_path(["parameters", p.path] if p.path else ["parameters"]), p.message)
            for p in error.problems
        ],
        "the parameters",
    )
