"""The errors every part of the platform raises; REST handlers map them to HTTP statuses."""

from __future__ import annotations


class KPLError(Exception):
    """A problem a person can act on; `status` is the HTTP status it maps to."""

    status = 500

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def to_json(self) -> dict:
        """Return the error as the body of an API response."""
        body = {"error": type(self).__name__, "message": self.message}
        if self.field is not None:
            body["field"] = self.field
        return body


class BadRequest(KPLError):
    """The request itself is wrong (a bad name, a malformed reference, an invalid file)."""

    status = 400


class Forbidden(KPLError):
    """The caller may not do this."""

    status = 403


class NotFound(KPLError):
    """No such object in this project (another project's objects are not found either)."""

    status = 404


class Conflict(KPLError):
    """The object is in a state that forbids the change (e.g. used by a running job)."""

    status = 409


class Unavailable(KPLError):
    """The server cannot take this now (e.g. too many imports waiting); trying later may work."""

    status = 503
