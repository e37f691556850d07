"""Take the file a prediction sent as a `multipart/form-data` form carries (a browser's upload form)."""

from __future__ import annotations

from tornado.httputil import HTTPFile, HTTPInputError, parse_body_arguments

from ..errors import BadRequest


def form_file(content_type: str, body: bytes) -> tuple[bytes, str]:
    """Return the body and content type of a multipart form's first file; refuse a form that cannot be read."""
    files: dict[str, list[HTTPFile]] = {}
    try:
        parse_body_arguments(content_type, body, {}, files)
    except HTTPInputError as error:  # no boundary, no closing boundary, a part without headers, ...
        raise BadRequest(f"the multipart form cannot be read: {error}", field="file") from None
    return first_file(files)


def first_file(files: dict[str, list[HTTPFile]]) -> tuple[bytes, str]:
    """Return the body and content type of the first file of a form read by tornado."""
    found = [file for parts in files.values() for file in parts]
    if not found:
        raise BadRequest("the multipart body holds no file", field="file")
    return found[0].body, found[0].content_type or "application/octet-stream"
