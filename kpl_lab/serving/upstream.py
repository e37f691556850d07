"""A small HTTP/1.1 client for the gateway's one request: POST a body to a replica over a kept-alive connection.

The gateway sends one kind of request to servers it knows, so an asyncio protocol per
connection (`http_messages.AnswerReader`, llhttp, reading the answer; one future per request) does
it with a fraction of a general client's work per request (tornado's curl client sets up a
curl handle and logs every header line; see benchmarks/README.md). Idle connections are
kept per replica (a Unix socket, `unix:PATH`, or a TCP port, `http://HOST:PORT`; see
`address`) and reused; one that the replica closed while idle (a restart) is noticed
before any answer byte came and the request goes once more on a new connection. Answers
with `Content-Length`, chunked, or ending at close are read. `post` times out on its own;
`post_now` (the gateway process's path) sets no timer per request: its owner calls `sweep`
every few seconds, so the event loop waits for sockets with no timer armed.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable

from . import address
from .http_messages import Answer, AnswerReader, BadMessage
from .memo import Memo

MAX_IDLE = 64  # kept-alive connections per replica
SINGLE_WRITE_BYTES = 64 * 1024  # smaller bodies go out with the head in one write


class NoAnswer(Exception):
    """The replica gave no HTTP answer; `sent` says whether it may have received the request."""

    def __init__(self, message: str, sent: bool) -> None:
        super().__init__(message)
        self.sent = sent


class StaleConnection(Exception):
    """A kept-alive connection was closed before any byte of the answer came."""


class _Link(asyncio.Protocol):
    """One kept-alive connection to a replica, carrying one request at a time; idle again once answered."""

    def __init__(self, upstream: Upstream, url: str) -> None:
        self.upstream, self.url = upstream, url
        self.reader = AnswerReader()
        self.transport: asyncio.Transport | None = None
        self.answered: Callable[[Answer | Exception], None] | None = None  # the request in flight's
        self.answered_any = False  # a byte of the current answer came
        self.closed = False
        self.deadline = 0.0  # loop time a request of `post_now` must be answered by

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, head: bytes, body: bytes, answered: Callable[[Answer | Exception], None]) -> None:
        """Write a request; `answered` gets its answer, or the exception that stands for none, once."""
        assert self.transport is not None
        self.answered_any = False
        self.answered = answered
        if len(body) <= SINGLE_WRITE_BYTES:
            self.transport.write(head + body)
        else:  # no copy of a large body
            self.transport.writelines((head, body))

    def data_received(self, data: bytes) -> None:
        if self.answered is None:  # bytes nobody asked for: the connection is unusable
            self.close()
            return
        self.answered_any = True
        reader = self.reader
        try:
            answer = reader.feed(data)
        except BadMessage as error:
            self.fail(NoAnswer(f"the replica's answer is not HTTP/1.1: {error}", sent=True))
            return
        if answer is not None:
            if not answer.keep or reader.surplus or reader.done:
                self.close()
            self._settle(answer)
        elif reader.done:  # it switched protocols (101): no answer of HTTP/1.1 comes
            self.fail(NoAnswer("the replica switched to another protocol", sent=True))

    def eof_received(self) -> bool:
        answer = self.reader.end()
        if answer is not None:
            self.closed = True
            self._settle(answer)  # a body that ends when the replica closes
        self.close()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.answered_any:
            self._settle(NoAnswer(f"the replica closed the connection mid-answer: {exc!r}", sent=True))
        else:
            self._settle(StaleConnection(f"closed before answering: {exc!r}"))

    def fail(self, error: Exception) -> None:
        """End the request in flight with `error` and close the connection."""
        self.close()
        self._settle(error)

    def close(self) -> None:
        """Close the connection; it carries no more requests."""
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _settle(self, outcome: Answer | Exception) -> None:
        """Hand the outcome to the request in flight."""
        answered, self.answered = self.answered, None
        if answered is None:
            return
        if isinstance(outcome, Exception):
            self.upstream.in_flight.discard(self)
            self.close()
            answered(outcome)
        else:
            self.upstream._deliver(self, answered, outcome)


class Upstream:
    """Kept-alive connections to replicas, one request at a time on each."""

    def __init__(self, connect_timeout: float, request_timeout: float) -> None:
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self._idle: dict[str, list[_Link]] = {}
        self._addresses: dict[str, tuple[str | None, str, int, bytes]] = {}  # URL -> socket, host, port, Host
        self._heads: Memo[tuple[str, str, str], bytes] = Memo(1024)  # (URL, path, content type) -> head
        self._loop: asyncio.AbstractEventLoop | None = None
        self.in_flight: set[_Link] = set()  # links carrying a request of `post_now`, for `sweep`

    async def post(self, url: str, path: str, body: bytes, content_type: str) -> Answer:
        """POST `body` to `url` + `path`; raise NoAnswer when no HTTP answer came."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # connections belong to the loop that opened them
            self.close()
            self._loop = loop
        head = self._head(url, path, body, content_type)
        while True:
            link = self._idle_link(url)
            reused = link is not None
            if link is None:
                link = await self._connect(loop, url)
            answer: asyncio.Future[Answer] = loop.create_future()
            link.send(head, body, functools.partial(_resolve, answer))
            try:
                async with asyncio.timeout(self.request_timeout):
                    return await answer
            except TimeoutError:
                link.close()
                raise NoAnswer(f"no answer within {self.request_timeout:g} s", sent=True) from None
            except StaleConnection as error:
                if reused:
                    continue  # closed while idle: send it again on another connection
                raise NoAnswer(f"the replica closed the connection: {error}", sent=True) from None
            except asyncio.CancelledError:  # the caller went away: the connection is mid-answer
                link.close()
                raise

    def post_now(
        self,
        url: str,
        path: str,
        body: bytes,
        content_type: str,
        answered: Callable[[Answer | Exception], None],
    ) -> bool:
        """Send on an idle kept-alive connection and return True (`answered` gets the outcome), else False.

        The outcome is an Answer, NoAnswer, or StaleConnection (closed while idle: send it again with `post`).
        No timer is set per request: whoever calls this calls `sweep` every few seconds too.
        """
        if asyncio.get_running_loop() is not self._loop:  # idle links belong to the loop of `post`
            return False
        link = self._idle_link(url)
        if link is None:
            return False
        link.send(self._head(url, path, body, content_type), body, answered)
        # after the write: the replica works on it meanwhile
        link.deadline = self._loop.time() + self.request_timeout  # type: ignore[union-attr]
        self.in_flight.add(link)
        return True

    def sweep(self) -> None:
        """End the requests of `post_now` that had no answer within request_timeout."""
        if self._loop is None:
            return
        now = self._loop.time()
        for link in [link for link in self.in_flight if link.deadline < now]:
            link.fail(NoAnswer(f"no answer within {self.request_timeout:g} s", sent=True))

    def _deliver(self, link: _Link, answered: Callable[[Answer | Exception], None], answer: Answer) -> None:
        """Hand an answer that came whole on; keep its link for the next request."""
        try:
            answered(answer)  # first: the caller waits for it
        finally:
            self.in_flight.discard(link)
            idle = self._idle.get(link.url)
            if idle is None:
                idle = self._idle[link.url] = []
            if not link.closed and len(idle) < MAX_IDLE:
                idle.append(link)
            else:
                link.close()

    def _idle_link(self, url: str) -> _Link | None:
        idle = self._idle.get(url)
        while idle:
            link = idle.pop()
            if not link.closed:
                return link
        return None

    def _head(self, url: str, path: str, body: bytes, content_type: str) -> bytes:
        """Return the head of a POST to a replica (made once per URL, path and content type)."""
        key = (url, path, content_type)
        head = self._heads.get(key)
        if head is None:
            head = self._heads.remember(
                key,
                b"".join(
                    (
                        b"POST ",
                        path.encode().replace(b"%", b"%%"),
                        b" HTTP/1.1\r\nHost: ",
                        self._address(url)[3],
                        b"\r\nContent-Type: ",
                        _header_value(content_type).replace(b"%", b"%%"),
                        b"\r\nContent-Length: %d\r\n\r\n",
                    )
                ),
            )
        return head % len(body)

    async def _connect(self, loop: asyncio.AbstractEventLoop, url: str) -> _Link:
        path, host, port, _ = self._address(url)
        try:
            async with asyncio.timeout(self.connect_timeout):
                if path is not None:
                    transport, link = await loop.create_unix_connection(lambda: _Link(self, url), path)
                    try:
                        address.check_peer(transport.get_extra_info("socket"), path)
                    except OSError:
                        transport.close()
                        raise
                else:
                    _, link = await loop.create_connection(lambda: _Link(self, url), host, port)
                return link
        except TimeoutError:
            raise NoAnswer(f"could not connect within {self.connect_timeout:g} s", sent=False) from None
        except OSError as error:
            raise NoAnswer(f"could not connect: {error}", sent=False) from None

    def _address(self, url: str) -> tuple[str | None, str, int, bytes]:
        """Return the socket path (None: TCP), host, port and Host header of a replica's address."""
        found = self._addresses.get(url)
        if found is None:
            path, host, port = address.split(url)
            found = self._addresses[url] = (
                path,
                host,
                port,
                f"{host}:{port}".encode() if host else b"localhost",
            )
        return found

    def close(self) -> None:
        """Close the idle connections."""
        for links in self._idle.values():
            for link in links:
                link.close()
        self._idle.clear()


def _resolve(future: asyncio.Future, outcome: object) -> None:
    if future.done():  # cancelled
        return
    if isinstance(outcome, Exception):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


def _header_value(text: str) -> bytes:
    """Return a header value without line breaks (they would start a header of the caller's)."""
    return text.replace("\r", " ").replace("\n", " ").encode("latin-1", "replace")
