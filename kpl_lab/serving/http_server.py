"""A small HTTP/1.1 server for the gateway process: whole requests in, whole answers out, kept-alive connections.

The gateway answers one kind of request, so an asyncio protocol per connection
(`http_messages.MessageReader` reading, one task per request answering) does it with a
fraction of a general server's work per request (see benchmarks/README.md). Request
bodies come with `Content-Length` or chunked; `Expect: 100-continue` is answered; a
connection stays open for the next request unless the caller says `Connection: close` (or
speaks HTTP/1.0 without keep-alive); requests sent ahead on one connection are answered in
order. A malformed request gets its error (400, 413, 431) and the connection closes. An
answer whose headers are a tuple (the gateway's, one per model version) has its head made
once and filled in with each body's length.
"""

from __future__ import annotations

import asyncio
import json
import traceback
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from http import HTTPStatus

from .http_messages import BadMessage, Message, MessageReader
from .memo import Memo

REASONS = {status.value: status.phrase for status in HTTPStatus}
LARGE_BODY_BYTES = 64 * 1024  # larger bodies are written apart from the head, not copied into it


class Request:
    """One request: method, target (path and query), headers (names lowercased), the whole body, and `respond`."""

    __slots__ = ("body", "headers", "method", "respond", "target")

    def __init__(
        self,
        method: str,
        target: str,
        headers: dict[str, str],
        body: bytes,
        respond: Callable[[Response], None] = lambda response: None,
    ) -> None:
        self.method, self.target, self.headers, self.body = method, target, headers, body
        # answers this request: for a handler that returned None and answers later, once
        self.respond = respond

    def header(self, name: str) -> str | None:
        """Return a header's value by any spelling of its name."""
        return self.headers.get(name.lower())


@dataclass(slots=True)
class Response:
    """One answer: status, body and extra headers (Content-Length is added)."""

    status: int
    body: bytes = b""
    headers: Sequence[tuple[str, str]] = ()


def json_response(status: int, document: dict, headers: list[tuple[str, str]] | None = None) -> Response:
    """Return a JSON answer."""
    return Response(
        status, json.dumps(document).encode(), [("Content-Type", "application/json"), *(headers or [])]
    )


# A handler returns the response, an awaitable of it (run as a task), or None when it has
# arranged to call `request.respond` once (from a callback: no task per request).
Handler = Callable[[Request], "Response | Awaitable[Response] | None"]


async def serve(handler: Handler, host: str, port: int, max_body_bytes: int) -> asyncio.Server:
    """Listen on host:port; every request is answered by `handler`."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(
        lambda: _Connection(handler, max_body_bytes), host, port, reuse_address=True, backlog=128
    )


class _Connection(asyncio.Protocol):
    """One caller's connection: read requests, answer them one after another."""

    def __init__(self, handler: Handler, max_body_bytes: int) -> None:
        self.handler = handler
        self.reader = MessageReader(max_body_bytes)
        self.transport: asyncio.Transport | None = None
        self.busy = False  # a request is being answered
        self.keep = True  # the connection stays open after that request's answer
        self.reading = False  # _next runs: an answer given meanwhile lets its loop go on
        self.answering: asyncio.Task | None = None
        self.continued = False  # `100 Continue` was sent for the request being read
        self.ended = False  # the caller sent its last byte
        self.paused = False  # the caller reads slower than we write

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.busy or self.reading or self.paused:  # read once the request being answered is
            self.reader.feed(data)
        else:
            self._next(data)

    def eof_received(self) -> bool:
        self.ended = True
        self._next()
        return True  # the transport stays open for the answer; _next closes it

    def connection_lost(self, exc: Exception | None) -> None:
        if self.answering is not None:
            self.answering.cancel()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self._next()

    def _next(self, data: bytes = b"") -> None:
        """Take bytes read, answer the whole requests read so far one at a time; close when the caller ended or erred."""
        assert self.transport is not None
        if self.reading:
            return
        self.reading = True
        try:
            while not self.busy and not self.paused and not self.transport.is_closing():
                try:
                    message, data = self.reader.next(data), b""
                except BadMessage as error:
                    self._fail(error)
                    return
                if message is None:
                    self._wait()
                    return
                self._start(message)
        finally:
            self.reading = False

    def _wait(self) -> None:
        """Nothing whole to answer: close at the caller's end, or let a waiting caller send its body."""
        assert self.transport is not None
        if self.ended:
            if self.reader.partial():
                self._fail(BadMessage(400, "the request ended before it was whole"))
            else:
                self.transport.close()
        elif self.reader.expects_continue() and not self.continued:
            self.continued = True
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def _start(self, message: Message) -> None:
        self.continued, self.busy = False, True
        self.keep = message.keep
        method, target, _ = message.start
        try:
            outcome = self.handler(Request(method, target, message.headers, message.body, self.respond))
        except Exception:
            outcome = _internal_error()
        if isinstance(outcome, Response):
            self.respond(outcome)
        elif outcome is not None:
            self.answering = asyncio.get_running_loop().create_task(self._await(outcome))

    async def _await(self, outcome: Awaitable[Response]) -> None:
        try:
            response = await outcome
        except asyncio.CancelledError:
            return  # the caller went away
        except Exception:
            response = _internal_error()
        self.answering = None
        self.respond(response)

    def respond(self, response: Response) -> None:
        """Answer the request being answered, unless it was answered or the caller went away."""
        assert self.transport is not None
        if not self.busy or self.transport.is_closing():
            return  # answered already, or the caller went away
        keep = self.keep
        _write(self.transport, response, keep)
        self.busy = False
        if not keep:
            self.transport.close()
        elif self.reader.buffer or self.ended:  # else nothing is waiting to be answered
            self._next()

    def _fail(self, error: BadMessage) -> None:
        assert self.transport is not None
        _write(self.transport, json_response(error.status, _error(error.status, str(error))), False)
        self.transport.close()


def _internal_error() -> Response:
    traceback.print_exc()
    return json_response(500, _error(500, "internal error of the gateway"))


def _error(status: int, message: str) -> dict:
    kind = "BadRequest" if status < 500 else "InternalError"
    return {"error": kind, "message": message, "field": None, "errors": []}


def _write(transport: asyncio.Transport, response: Response, keep: bool) -> None:
    body = response.body
    remembered = type(response.headers) is tuple  # answers the gateway gives again and again
    key = (response.status, response.headers, keep)
    head = _heads.get(key) if remembered else None  # type: ignore[arg-type]
    if head is None:
        head = _head(response, keep)
        if remembered:
            _heads.remember(key, head)  # type: ignore[arg-type]
    if len(body) <= LARGE_BODY_BYTES:
        transport.write(head % len(body) + body)
    else:
        transport.writelines((head % len(body), body))


# heads of answers whose headers are a tuple, by status, headers and keep-alive; `%d` is the Content-Length
_heads: Memo[tuple[int, tuple[tuple[str, str], ...], bool], bytes] = Memo(1024)


def _head(response: Response, keep: bool) -> bytes:
    lines = [f"HTTP/1.1 {response.status} {REASONS.get(response.status, 'Unknown')}"]
    lines.extend(f"{name}: {_value(value)}" for name, value in response.headers)
    if not keep:
        lines.append("Connection: close")
    lines.append("Content-Length: ")
    return "\r\n".join(lines).encode("latin-1", "replace").replace(b"%", b"%%") + b"%d\r\n\r\n"


def _value(text: str) -> str:
    """Return a header value without line breaks (they would start a header of their own)."""
    return text.replace("\r", " ").replace("\n", " ")
