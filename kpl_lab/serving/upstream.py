"""A small HTTP/1.1 client for the gateway's one request: POST a body to a replica over a kept-alive connection.

The gateway sends one kind of request to servers it knows, so an asyncio protocol per
connection (`http_messages.MessageReader` reading the answer, one future per request) does
it with a fraction of a general client's work per request (tornado's curl client sets up a
curl handle and logs every header line; see benchmarks/README.md). Idle connections are
kept per replica and reused; one that the replica closed while idle (a restart) is noticed
before any answer byte came and the request goes once more on a new connection. Answers
with `Content-Length`, chunked, or ending at close are read.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from urllib.parse import urlsplit

from .http_messages import BadMessage, Message, MessageReader

MAX_IDLE = 64  # kept-alive connections per replica
SINGLE_WRITE_BYTES = 64 * 1024  # smaller bodies go out with the head in one write


class NoAnswer(Exception):
    """The replica gave no HTTP answer; `sent` says whether it may have received the request."""

    def __init__(self, message: str, sent: bool) -> None:
        super().__init__(message)
        self.sent = sent


@dataclass
class Answer:
    """A replica's status and body."""

    status: int
    body: bytes


class _Stale(Exception):
    """A kept-alive connection was closed before any byte of the answer came."""


class _Link(asyncio.Protocol):
    """One kept-alive connection to a replica, carrying one request at a time."""

    def __init__(self) -> None:
        self.reader = MessageReader(None, answers=True)
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[Message] | None = None
        self.answered_any = False  # a byte of the current answer came
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, data: bytes, body: bytes | None) -> asyncio.Future[Message]:
        """Write a request; return the future of its answer."""
        assert self.transport is not None
        self.answered_any = False
        self.waiter = asyncio.get_running_loop().create_future()
        if body is None:
            self.transport.write(data)
        else:
            self.transport.writelines((data, body))
        return self.waiter

    def data_received(self, data: bytes) -> None:
        if self.waiter is None or self.waiter.done():  # bytes nobody asked for: the connection is unusable
            self.close()
            return
        self.answered_any = True
        self.reader.feed(data)
        try:
            message = self.reader.next()
        except BadMessage as error:
            self._fail(NoAnswer(f"the replica's answer is not HTTP: {error}", sent=True))
            return
        if message is not None:
            self.waiter.set_result(message)
            if not message.keep:
                self.close()

    def eof_received(self) -> bool:
        message = self.reader.end()
        if message is not None and self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(message)  # a body that ends when the replica closes
        self.close()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            if self.answered_any:
                self.waiter.set_exception(
                    NoAnswer(f"the replica closed the connection mid-answer: {exc!r}", True)
                )
            else:
                self.waiter.set_exception(_Stale(f"closed before answering: {exc!r}"))

    def _fail(self, error: Exception) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(error)
        self.close()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class Upstream:
    """Kept-alive connections to replicas, one request at a time on each."""

    def __init__(self, connect_timeout: float, request_timeout: float) -> None:
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self._idle: dict[str, list[_Link]] = {}
        self._addresses: dict[str, tuple[str, int, bytes]] = {}  # URL -> host, port, Host header
        self._loop: asyncio.AbstractEventLoop | None = None

    async def post(self, url: str, path: str, body: bytes, content_type: str) -> Answer:
        """POST `body` to `url` + `path`; raise NoAnswer when no HTTP answer came."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # connections belong to the loop that opened them
            self.close()
            self._loop = loop
        host, port, host_header = self._address(url)
        head = b"".join(
            (
                b"POST ",
                path.encode(),
                b" HTTP/1.1\r\nHost: ",
                host_header,
                b"\r\nContent-Type: ",
                _header_value(content_type),
                b"\r\nContent-Length: ",
                str(len(body)).encode(),
                b"\r\n\r\n",
            )
        )
        single = len(body) <= SINGLE_WRITE_BYTES
        idle = self._idle.setdefault(url, [])
        while True:
            while idle and idle[-1].closed:
                idle.pop()
            reused = bool(idle)
            link = idle.pop() if reused else await self._connect(loop, host, port)
            answer = link.send(head + body, None) if single else link.send(head, body)
            timer = loop.call_later(self.request_timeout, _expire, answer, self.request_timeout)
            try:
                message = await answer
            except _Stale as error:
                if reused:
                    continue  # closed while idle: send it again on another connection
                raise NoAnswer(f"the replica closed the connection: {error}", sent=True) from None
            except BaseException:  # no answer in time, or cancelled (the caller went away): mid-answer
                link.close()
                raise
            finally:
                timer.cancel()
            if not link.closed and len(idle) < MAX_IDLE:
                idle.append(link)
            else:
                link.close()
            return Answer(int(message.start[1]), message.body)

    async def _connect(self, loop: asyncio.AbstractEventLoop, host: str, port: int) -> _Link:
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, link = await loop.create_connection(_Link, host, port)
                return link
        except TimeoutError:
            raise NoAnswer(f"could not connect within {self.connect_timeout:g} s", sent=False) from None
        except OSError as error:
            raise NoAnswer(f"could not connect: {error}", sent=False) from None

    def _address(self, url: str) -> tuple[str, int, bytes]:
        found = self._addresses.get(url)
        if found is None:
            parts = urlsplit(url)
            if parts.scheme != "http" or not parts.hostname:
                raise ValueError(f"a replica URL must be http://HOST[:PORT], got {url!r}")
            port = parts.port or 80
            found = self._addresses[url] = (parts.hostname, port, f"{parts.hostname}:{port}".encode())
        return found

    def close(self) -> None:
        """Close the idle connections."""
        for links in self._idle.values():
            for link in links:
                link.close()
        self._idle.clear()


def _expire(answer: asyncio.Future, seconds: float) -> None:
    if not answer.done():
        answer.set_exception(NoAnswer(f"no answer within {seconds:g} s", sent=True))


def _header_value(text: str) -> bytes:
    """Return a header value without line breaks (they would start a header of the caller's)."""
    return text.replace("\r", " ").replace("\n", " ").encode("latin-1", "replace")
