"""A small HTTP/1.1 server for the gateway process: whole requests in, whole answers out, kept-alive connections.

The gateway answers one kind of request, so an asyncio protocol per connection
(`http_messages.RequestReader`, llhttp, reading; one task per request answering) does it
with a fraction of a general server's work per request (see benchmarks/README.md). Request
bodies come with `Content-Length` or chunked; `Expect: 100-continue` is answered; a
connection stays open for the next request unless the caller says `Connection: close` (or
speaks HTTP/1.0 without keep-alive); requests sent ahead on one connection are answered in
order, and the connection is not read while they wait. A request that cannot be read gets
its error (400, 413, 431; see `http_messages`) after the answers to the ones before it, and
the connection closes. A request asking to upgrade the connection (or CONNECT) is answered
as HTTP/1.1 and the connection closes after it. An answer whose headers are a tuple (the
gateway's, one per model version) has its head made once and filled in with each body's
length.
"""

from __future__ import annotations

import asyncio
import json
import traceback
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from http import HTTPStatus

from .http_messages import BadMessage, Message, RequestReader
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
        self.reader = RequestReader(max_body_bytes)
        self.transport: asyncio.Transport | None = None
        self.busy = False  # a request is being answered
        self.keep = True  # the connection stays open after that request's answer
        self.looping = False  # _next runs: an answer given meanwhile lets its loop go on
        self.answering: asyncio.Task | None = None
        self.continued = False  # `100 Continue` was sent for the request being read
        self.ended = False  # the caller sent its last byte
        self.paused = False  # the caller reads slower than we write
        self.held = False  # reading is paused while requests read wait for their answer
        self.failure: BadMessage | None = None  # what the bytes after the requests read were

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        reader = self.reader
        if self.failure is None:
            try:
                reader.feed(data)
            except BadMessage as error:
                self.failure = error  # answered after the requests before it
        if not self.busy:
            self._next()
        if reader.ready and not self.held:  # a caller sending ahead waits for its answers
            self.held = True
            self.transport.pause_reading()  # type: ignore[union-attr]

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

    def _next(self) -> None:
        """Answer the whole requests read so far one at a time; close when the caller ended or erred."""
        assert self.transport is not None
        if self.looping:
            return
        self.looping = True
        try:
            ready = self.reader.ready
            while not self.busy and not self.paused and not self.transport.is_closing():
                if not ready:
                    self._wait()
                    return
                self._start(ready.popleft())
        finally:
            self.looping = False

    def _wait(self) -> None:
        """Nothing whole to answer: fail or close at the caller's end, else read on (`100 Continue` if asked)."""
        assert self.transport is not None
        if self.failure is not None:
            self._fail(self.failure)
        elif self.ended:
            if self.reader.started:
                self._fail(BadMessage(400, "the request ended before it was whole"))
            else:
                self.transport.close()
        else:
            if self.held:
                self.held = False
                self.transport.resume_reading()
            if self.reader.expecting and not self.continued:
                self.continued = True
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def _start(self, message: Message) -> None:
        self.continued, self.busy = False, True
        method, target, headers, body, self.keep = message
        try:
            outcome = self.handler(Request(method, target, headers, body, self.respond))
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
        elif self.held or self.reader.expecting or self.failure is not None or self.ended:
            self._next()  # else nothing waits: no request read, no caller waiting for `100 Continue`

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
