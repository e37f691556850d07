"""A small HTTP/1.1 client for the gateway's one request: POST a body to a replica over a kept-alive connection.

The gateway sends one kind of request to servers it knows, so a plain asyncio stream per
connection does it with a fraction of a general client's work per request (tornado's curl
client sets up a curl handle and logs every header line; see benchmarks/README.md). Idle
connections are kept per replica and reused; one that the replica closed while idle (a
restart) is noticed before any answer byte came and the request goes once more on a new
connection. Answers with `Content-Length`, chunked, or ending at close are read.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_IDLE = 64  # kept-alive connections per replica
MAX_HEAD_BYTES = 64 * 1024
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


class Upstream:
    """Kept-alive connections to replicas, one request at a time on each."""

    def __init__(self, connect_timeout: float, request_timeout: float) -> None:
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self._idle: dict[str, list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]] = {}
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
        idle = self._idle.setdefault(url, [])
        while True:
            while idle and (idle[-1][0].at_eof() or idle[-1][1].is_closing()):  # closed while idle
                idle.pop()[1].close()
            reused = bool(idle)
            if reused:
                reader, writer = idle.pop()
            else:
                reader, writer = await self._connect(host, port)
            try:
                async with asyncio.timeout(self.request_timeout):
                    if len(body) <= SINGLE_WRITE_BYTES:
                        writer.write(head + body)
                    else:  # no copy of a large body
                        writer.write(head)
                        writer.write(body)
                    answer, keep = await _read_answer(reader)
            except _Stale as error:
                writer.close()
                if reused:
                    continue  # closed while idle: send it again on another connection
                raise NoAnswer(f"the replica closed the connection: {error}", sent=True) from None
            except TimeoutError:
                writer.close()
                raise NoAnswer(f"no answer within {self.request_timeout:g} s", sent=True) from None
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as error:
                writer.close()
                raise NoAnswer(f"the replica closed the connection: {error!r}", sent=True) from None
            except BaseException:  # cancelled (the caller went away): the connection is mid-answer
                writer.close()
                raise
            if keep and len(idle) < MAX_IDLE:
                idle.append((reader, writer))
            else:
                writer.close()
            return answer

    async def _connect(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            async with asyncio.timeout(self.connect_timeout):
                return await asyncio.open_connection(host, port, limit=MAX_HEAD_BYTES)
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
        for connections in self._idle.values():
            for _, writer in connections:
                writer.close()
        self._idle.clear()


async def _read_answer(reader: asyncio.StreamReader) -> tuple[Answer, bool]:
    """Read one answer; return it and whether the connection may carry another request."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as error:
        if not error.partial:
            raise _Stale("closed before answering") from None
        raise
    except ConnectionResetError as error:
        raise _Stale(str(error)) from None
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    status = int(rest[:3])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name:
            headers[name.strip().lower()] = value.strip()
    connection = headers.get("connection", "").lower()
    keep = (version == "HTTP/1.1" and connection != "close") or (
        version == "HTTP/1.0" and connection == "keep-alive"
    )
    if status in (204, 304) or 100 <= status < 200:
        return Answer(status, b""), keep
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return Answer(status, await _read_chunks(reader)), keep
    length = headers.get("content-length")
    if length is not None:
        return Answer(status, await reader.readexactly(int(length))), keep
    return Answer(status, await reader.read()), False  # the body ends when the replica closes


async def _read_chunks(reader: asyncio.StreamReader) -> bytes:
    parts = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                pass
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


def _header_value(text: str) -> bytes:
    """Return a header value without line breaks (they would start a header of the caller's)."""
    return text.replace("\r", " ").replace("\n", " ").encode("latin-1", "replace")
