"""Read a request as the routes table declares it and run its operation: one copy for both transports.

The REST handlers (`kpl_lab.server_ext`) and the in-process transport (`local`) both read
path and query arguments with `arguments`, a JSON body with `body`, and answer what the
operation returns with `encode`; a refusal is a `BadRequest` naming the argument or the
field, the same on both.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any
from urllib.parse import unquote

from pydantic import BaseModel, ValidationError

from ..documents import DocumentError, load_json
from ..errors import BadRequest, validation_error
from .spec import Operation, Query, Raw, Route

OFFSET_MAX = 2**62  # the largest `offset` a query takes (a record index or a byte of a log)
_SEGMENT = "[^/]+"
NUMBERS = ("index", "record")  # path arguments that are whole numbers


def path_pattern(path: str) -> str:
    """Turn `/datasets/{name}` into the regular expression `/datasets/([^/]+)` (an `{index}`, a `{record}`: digits)."""
    return re.sub(r"\{(\w+)\}", lambda m: f"({'[0-9]+' if m.group(1) in NUMBERS else _SEGMENT})", path)


def path_names(route: Route) -> list[str]:
    """Return the names of a route's path arguments, in order."""
    return re.findall(r"\{(\w+)\}", route.path)


def match(routes: list[Route], path: str) -> tuple[Route, dict[str, str]] | None:
    """Return the route a path (relative to the API root, `%`-escaped) takes and its arguments, or None."""
    for route in routes:
        found = re.fullmatch(path_pattern(route.path) + "/?", "/" + path.strip("/"))
        if found is not None:
            return route, dict(zip(path_names(route), map(unquote, found.groups()), strict=True))
    return None


def _integer(query: Query, text: str | None) -> int | None:
    schema = query.schema
    values = schema.get("enum") or ()
    low = schema.get("minimum", min(values, default=-OFFSET_MAX))
    high = schema.get("maximum", max(values, default=OFFSET_MAX))
    if text is None:  # `?limit=` is no integer: the document says so
        return schema.get("default")
    try:
        value = int(text)
    except ValueError:
        raise BadRequest(f"{query.name}: expected an integer, got {text!r}", field=query.name) from None
    if not low <= value <= high:
        raise BadRequest(f"{query.name}: must be between {low} and {high}, got {value}", field=query.name)
    return value


def _value(query: Query, text: str | None) -> Any:
    """Return a query argument as its declaration types it (absent: its default, else None)."""
    if isinstance(query.schema, type) and issubclass(query.schema, Enum):
        if text is None:  # `?state=` is no state
            return None
        known = [item.value for item in query.schema]
        if text not in known:
            raise BadRequest(f"{query.name}: {text!r} is not one of {', '.join(known)}", field=query.name)
        return text
    if query.schema.get("type") == "integer":
        return _integer(query, text)
    return query.schema.get("default") if text is None else text


def arguments(
    route: Route, operation: Operation, path: Mapping[str, str], query: Callable[[str], str | None]
) -> dict[str, Any]:
    """Return the path arguments and every declared query argument, typed, as the operation's keywords."""
    return {**path, **{q.name: _value(q, query(q.name)) for q in operation.query}}


def parse_json(raw: bytes) -> Any:
    """Return a request body parsed as JSON (an empty body is None), nesting bounded."""
    if not raw:
        return None
    try:
        return load_json(raw)
    except DocumentError as error:
        raise BadRequest(f"the request body: {error}", field="body") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise BadRequest(f"the request body is not valid JSON: {error}", field="body") from None


def _only_whole_floats(error: ValidationError) -> bool:
    """Say whether strict validation refused nothing but whole numbers written as floats for integers."""
    return all(
        e["type"] == "int_type" and isinstance(e["input"], float) and e["input"].is_integer()
        for e in error.errors()
    )


def body(operation: Operation, raw: bytes, fixed: Mapping[str, Any]) -> Any:
    """Return the body an operation declares: checked by its model (no body: the defaults), else as parsed."""
    model = operation.body
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return parse_json(raw)
    if not raw:
        if operation.body_required:
            raise BadRequest(f"the request body is required: a JSON object of {model.__name__}", field="body")
        data = {}
    else:
        data = parse_json(raw)
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


def token_of(authorization: str) -> str:
    """Return the token of an `Authorization: token ...` header ("" for another scheme or none)."""
    scheme, _, token = authorization.partition(" ")
    return token.strip() if scheme.lower() == "token" else ""


def encode(result: BaseModel | Raw) -> Raw:
    """Return an operation's answer as it goes out: a model as its JSON, a raw answer as it is."""
    if isinstance(result, Raw):
        return result
    return Raw(result.model_dump_json(by_alias=True).encode(), "application/json")


def answer(result: BaseModel | Raw) -> Raw:
    """Return an operation's answer as bytes in memory (what the in-process transport hands its client)."""
    raw = encode(result)
    return Raw(raw.read(), raw.content_type, raw.headers, raw.status)


def dumps(value: Any) -> bytes:
    """Return a JSON document of plain values (a field's value, the hub admin page's answers)."""
    return json.dumps(value, default=str).encode()
