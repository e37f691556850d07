"""A small HTTP/1.1 server for the gateway process: whole requests in, whole answers out, kept-alive connections.

The gateway answers one kind of request, so a plain asyncio stream per connection does it
with a fraction of a general server's work per request (see benchmarks/README.md). Request
bodies come with `Content-Length` or chunked; `Expect: 100-continue` is answered; a
connection stays open for the next request unless the caller says `Connection: close` (or
speaks HTTP/1.0 without keep-alive). A malformed request gets 400 and the connection closes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus

MAX_HEAD_BYTES = 64 * 1024


@dataclass
class Request:
    """One request: method, target (path and query), headers (names lowercased) and the whole body."""

    method: str
    target: str
    headers: dict[str, str]
    body: bytes

    def header(self, name: str) -> str | None:
        """Return a header's value by any spelling of its name."""
        return self.headers.get(name.lower())


@dataclass
class Response:
    """One answer: status, body and extra headers (Content-Length is added)."""

    status: int
    body: bytes = b""
    headers: list[tuple[str, str]] = field(default_factory=list)


def json_response(status: int, document: dict, headers: list[tuple[str, str]] | None = None) -> Response:
    """Return a JSON answer."""
    return Response(
        status, json.dumps(document).encode(), [("Content-Type", "application/json"), *(headers or [])]
    )


class BadMessage(Exception):
    """The request cannot be read; `status` says why (400, 413, 431)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


Handler = Callable[[Request], Awaitable[Response]]


async def serve(handler: Handler, host: str, port: int, max_body_bytes: int) -> asyncio.Server:
    """Listen on host:port; every request is answered by `handler`."""

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _connection(reader, writer, handler, max_body_bytes)

    return await asyncio.start_server(connection, host, port, limit=MAX_HEAD_BYTES, reuse_address=True)


async def _connection(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, handler: Handler, max_body_bytes: int
) -> None:
    try:
        while True:
            try:
                request, keep = await _read_request(reader, writer, max_body_bytes)
            except BadMessage as error:
                _write(
                    writer,
                    json_response(
                        error.status,
                        {"error": "BadRequest", "message": str(error), "field": None, "errors": []},
                    ),
                    False,
                )
                await writer.drain()
                return
            if request is None:  # the caller closed the connection between requests
                return
            response = await handler(request)
            _write(writer, response, keep)
            await writer.drain()
            if not keep:
                return
    except (ConnectionError, asyncio.IncompleteReadError):
        pass  # the caller went away mid-request
    finally:
        writer.close()


async def _read_request(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, max_body_bytes: int
) -> tuple[Request | None, bool]:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as error:
        if error.partial.strip():
            raise BadMessage(400, "the request ended inside its head") from None
        return None, False
    except asyncio.LimitOverrunError:
        raise BadMessage(431, f"the request head is over {MAX_HEAD_BYTES} bytes") from None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadMessage(400, f"not an HTTP/1.x request line: {lines[0][:100]!r}")
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise BadMessage(400, f"malformed header line: {line[:100]!r}")
        name = name.lower()
        headers[name] = f"{headers[name]}, {value.strip()}" if name in headers else value.strip()
    connection = headers.get("connection", "").lower()
    keep = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    if headers.get("expect", "").lower() == "100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = await _read_chunks(reader, max_body_bytes)
    elif "content-length" in headers:
        try:
            length = int(headers["content-length"])
        except ValueError:
            raise BadMessage(400, f"Content-Length is not a number: {headers['content-length']!r}") from None
        if length < 0:
            raise BadMessage(400, f"Content-Length is negative: {length}")
        if length > max_body_bytes:
            raise BadMessage(413, f"the body ({length} bytes) is over the gateway's {max_body_bytes} bytes")
        body = await reader.readexactly(length)
    else:
        body = b""
    return Request(method, target, headers, body), keep


async def _read_chunks(reader: asyncio.StreamReader, max_body_bytes: int) -> bytes:
    parts, total = [], 0
    while True:
        line = await reader.readuntil(b"\r\n")
        try:
            size = int(line.split(b";", 1)[0], 16)
        except ValueError:
            raise BadMessage(400, f"malformed chunk size: {line[:40]!r}") from None
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                pass
            return b"".join(parts)
        total += size
        if total > max_body_bytes:
            raise BadMessage(413, f"the chunked body is over the gateway's {max_body_bytes} bytes")
        parts.append(await reader.readexactly(size))
        if await reader.readexactly(2) != b"\r\n":
            raise BadMessage(400, "a chunk does not end with CRLF")


def _write(writer: asyncio.StreamWriter, response: Response, keep: bool) -> None:
    try:
        reason = HTTPStatus(response.status).phrase
    except ValueError:
        reason = "Unknown"
    lines = [f"HTTP/1.1 {response.status} {reason}", f"Content-Length: {len(response.body)}"]
    lines.extend(f"{name}: {_value(value)}" for name, value in response.headers)
    if not keep:
        lines.append("Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")
    writer.write(head + response.body if len(response.body) <= 64 * 1024 else head)
    if len(response.body) > 64 * 1024:  # no copy of a large body
        writer.write(response.body)


def _value(text: str) -> str:
    """Return a header value without line breaks (they would start a header of their own)."""
    return text.replace("\r", " ").replace("\n", " ")
