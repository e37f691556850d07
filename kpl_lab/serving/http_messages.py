"""Read HTTP/1.1 messages with httptools (llhttp, the parser of Node.js and uvicorn): requests and answers.

The gateway process's server reads requests with `RequestReader` and its client reads the
replicas' answers with `AnswerReader`, both from asyncio protocols' `data_received`: no
stream, task or future per message. llhttp frames messages as RFC 9112 says and refuses
what could be read two ways: `Content-Length` with `Transfer-Encoding` (§6.1), a repeated
`Content-Length`, a transfer coding other than a final `chunked`, a chunk size that is not
hex or overflows, obs-fold, a bare CR or LF, a header name that is no token, control
characters in a value, a method or version it does not know, data after a message that
closes the connection.

What llhttp leaves to its user is checked here: versions other than 1.0 and 1.1 (400),
bodies over the limit (413) and heads over `MAX_HEAD_BYTES` (431). llhttp reads a line of
any length, and httptools hands a header over only once its line ends, so a line that never
ends is caught by counting bytes: each callback accounts for the bytes it reports, and bytes
read that none accounted for yet are a line being read. Data is fed in pieces of
`PIECE_BYTES` while a head or chunked body is read, so that count is never off by more than
one piece: a head line that never ends gets 431 within `MAX_HEAD_BYTES` and a piece, a
chunk-size line (with its extensions) or trailer line over `MAX_LINE_BYTES` gets 400 within
a piece more.

A kept-alive caller sends the same head each time but for its Content-Length, and a replica
answers with the same head: when one read brings one whole message whose head was read
lately but for its length (the connection's last head, compared in place, else one of any
connection's `seen_heads`), a second parser with no callback but the message's end reads it
(llhttp still checks every byte and frames the message) and the headers are taken from the
first read. Such a request costs less than half the Python of one read with callbacks for
each header, and less than the hand-written parser this module replaced (benchmarks/README.md).
"""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace
from typing import Any, NamedTuple

import httptools

from .memo import Memo

MAX_HEAD_BYTES = 64 * 1024  # the request or status line and the header lines (trailers count too)
MAX_LINE_BYTES = 4096  # a chunk-size line with its extensions, or a trailer line
PIECE_BYTES = 4096  # while a head or chunked body is read, data is fed in pieces of this size
VERSIONS = ("1.1", "1.0")
MAX_SEEN_HEAD_BYTES = 4096  # heads up to this size are remembered (as read) ...
MAX_SEEN_HEADS = 256  # ... this many of them: a kept-alive caller sends the same head each time
NO_BODY_STATUSES = (204, 304)  # answers that have no body whatever their Content-Length says


class BadMessage(Exception):
    """The message cannot be read; `status` says why (400, 413, 431)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


# One whole request: method, target, headers (names lowercased, repeated ones joined), body,
# and whether the connection may carry another request (a plain tuple: made for every request).
Message = tuple[str, str, dict[str, str], bytes, bool]


class Answer(NamedTuple):
    """One whole answer: its status and body."""

    status: int
    body: bytes
    keep: bool = True  # the connection may carry another request


def _answer(status: int, body: bytes, keep: bool) -> Answer:
    return tuple.__new__(Answer, (status, body, keep))  # a NamedTuple's own __new__ is Python, twice as dear


class _Reader:
    """What reading requests and answers share: bodies, limits and the count of unaccounted bytes."""

    kind = "message"  # what is read, for errors
    seen_heads: Memo[bytes, Any]  # a head without its Content-Length line -> what it read to

    def __init__(self, max_body_bytes: int | None, parser: type) -> None:
        self.max_body_bytes = max_body_bytes
        self.parser = parser(self)
        # the same parser with no callback but the message's end, for a head read lately (`_seen`)
        self._seen_parser = parser(SimpleNamespace(on_message_complete=self._seen_complete))
        self._seen: Message | Answer | None = None  # the message that the read given to it holds
        # this connection's last head: (its bytes up to its length, after it, what it read to)
        self._last: tuple[bytes, bytes, Any] | None = None
        self._unseen: tuple[bytes, bytes, bytes] | None = None  # the key, start and end of a head being read
        self.started = False  # a message began and is not whole
        self.done = False  # no more messages come: an upgrade (another protocol follows) or an error
        self._body: list[bytes] = []
        self._in_head = True  # reading a head (or the bytes before one)
        self._chunked = False
        self._body_bytes = 0  # of a chunked body
        self._chunk_start = 0
        self._counted = 0  # bytes that callbacks accounted for, ever
        self._head_start = 0  # _counted when the message being read began
        self._mark = 0  # _counted when the last piece was fed
        self._pending = 0  # bytes fed that no callback accounted for yet: the line being read

    def _lookup(self, data: bytes) -> tuple[Any, str, int] | None:
        """Return (what a head read lately read to, its Content-Length, where the body starts) when `data`
        is one whole message with such a head but for its length; else None.

        This connection's last head is compared in place; else a small head's Content-Length line
        is looked for and the rest looked up among every connection's heads.
        """
        last = self._last
        if last is not None and data.startswith(last[0]):
            start, end, seen = last
            at = len(start)
            stop = data.find(b"\r\n", at, at + 32)
            if stop > 0 and data.startswith(end, stop):
                length, body = data[at:stop].strip(), stop + len(end)
                if length.isdigit() and int(length) == len(data) - body:
                    return seen, length.decode(), body
        found = _one_whole(data)
        if found is None:
            return None
        at, stop, end = found
        key = data[:at] + data[stop:end]
        start, end_bytes = data[: at + 17], data[stop : end + 4]
        seen = self.seen_heads.get(key)
        if seen is None:
            self._unseen = (key, start, end_bytes)
            return None
        self._last = (start, end_bytes, seen)
        return seen, data[at + 17 : stop].strip().decode(), end + 4

    def _remember(self, seen: Any) -> None:
        """Remember what the head of the read's one whole message (`_lookup` found none) read to."""
        key, start, end = self._unseen  # type: ignore[misc]
        self.seen_heads.remember(key, seen)
        self._last = (start, end, seen)
        self._unseen = None

    def _read_seen(self, data: bytes, message: Message | Answer) -> None:
        """Read `data`, one whole message whose head was read before: `message` is what it holds."""
        self._seen = message
        try:
            self._seen_parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.done = True  # what follows is no HTTP/1.1: the connection closes after this answer
        except httptools.HttpParserError as error:
            raise self._refusal(error) from None
        self._pending = 0

    def _feed(self, data: bytes) -> None:
        """Parse bytes read from the connection; raise BadMessage when they cannot be read."""
        if len(data) <= PIECE_BYTES or not (self._in_head or self._chunked):
            self._parse(data)
        else:
            view = memoryview(data)
            for at in range(0, len(data), PIECE_BYTES):
                self._parse(view[at : at + PIECE_BYTES])
                if self.done:
                    break
        self._unseen = None

    def _parse(self, data: bytes | memoryview) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.done = True
            return
        except httptools.HttpParserError as error:
            raise self._refusal(error) from None
        counted = self._counted
        if counted != self._mark:  # what follows the last bytes accounted for is pending
            pending = len(data) - (counted - self._mark)
            self._pending = pending if pending > 0 else 0
            self._mark = counted
        else:
            self._pending += len(data)
        if self._pending or self._in_head:
            self._check_pending()

    def _refusal(self, error: httptools.HttpParserError) -> BadMessage:
        self.done = True
        cause = error.__context__
        if isinstance(cause, BadMessage):
            return cause
        return BadMessage(400, f"malformed {self.kind}: {error}")

    def _check_pending(self) -> None:
        if self._in_head:
            if self._counted - self._head_start + self._pending > MAX_HEAD_BYTES:
                self.done = True
                raise BadMessage(431, f"the head is over {MAX_HEAD_BYTES} bytes")
        elif self._chunked and self._pending > MAX_LINE_BYTES:
            self.done = True
            raise BadMessage(400, f"a chunk-size or trailer line is over {MAX_LINE_BYTES} bytes")

    def _headers_read(self, start_line_bytes: int) -> None:
        """End a head: check its size; from now on its body is read."""
        self._counted += start_line_bytes + 2  # and the empty line
        if self._counted - self._head_start > MAX_HEAD_BYTES:
            raise BadMessage(431, f"the head is over {MAX_HEAD_BYTES} bytes")
        self._in_head = False

    def _whole(self) -> bytes:
        """Return the body of the message just read; get ready for the next."""
        body = self._body
        self._body = []
        self.started, self._in_head, self._chunked = False, True, False
        self._body_bytes = 0
        self._head_start = self._counted
        return b"".join(body)

    def _seen_complete(self) -> None:
        raise NotImplementedError

    # httptools' callbacks

    def on_message_begin(self) -> None:
        self.started = True

    def on_body(self, body: bytes) -> None:
        self._counted += len(body)
        self._body.append(body)
        if self._chunked:  # a Content-Length body was checked with its head
            self._body_bytes += len(body)
            if self.max_body_bytes is not None and self._body_bytes > self.max_body_bytes:
                raise BadMessage(413, f"the chunked body is over the gateway's {self.max_body_bytes} bytes")

    def on_chunk_header(self) -> None:
        self._chunk_start = self._body_bytes

    def on_chunk_complete(self) -> None:
        size = self._body_bytes - self._chunk_start
        self._counted += max(1, (size.bit_length() + 3) // 4) + 4  # hex size, CRLF, data, CRLF


class RequestReader(_Reader):
    """Read a connection's requests; whole ones wait in `ready`, in the order they came."""

    kind = "request"
    seen_heads: Memo[bytes, tuple[str, str, dict[str, str], bool]] = Memo(MAX_SEEN_HEADS)  # method, target,
    # headers but Content-Length, keep-alive

    def __init__(self, max_body_bytes: int) -> None:
        super().__init__(max_body_bytes, httptools.HttpRequestParser)
        self.max_body_bytes: int = max_body_bytes
        self.ready: deque[Message] = deque()
        self.expecting = False  # the request being read waits for `100 Continue` before its body
        self._target = b""
        self._headers: dict[str, str] = {}
        self._method = ""
        self._keep = True

    def feed(self, data: bytes) -> None:
        """Read bytes from the connection: the requests they complete go to `ready`.

        Raise BadMessage for a request that cannot be read (the ones before it are in `ready`).
        """
        if self.done:
            return
        if not self.started and (found := self._lookup(data)) is not None:
            (method, target, headers, keep), length, body = found
            if len(data) - body > self.max_body_bytes:
                self.done = True
                raise BadMessage(413, _over(len(data) - body, self.max_body_bytes))
            headers = {**headers, "content-length": length}
            self._read_seen(data, (method, target, headers, data[body:], keep))
            return
        self._feed(data)

    def _seen_complete(self) -> None:
        self.ready.append(self._seen)  # type: ignore[arg-type]

    def on_url(self, url: bytes) -> None:
        self._target += url
        self._counted += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._counted += len(name) + len(value) + 4  # `name: value` and CRLF
        if self._in_head:  # else a trailer: counted, not kept
            key = _names.get(name)
            if key is None:
                key = _names.remember(name, name.decode("latin-1").lower())
            text = value.decode("latin-1").strip()
            headers = self._headers
            headers[key] = f"{headers[key]}, {text}" if key in headers else text

    def on_headers_complete(self) -> None:
        parser = self.parser
        version = parser.get_http_version()
        if version not in VERSIONS:
            raise BadMessage(400, f"HTTP/{version} is not spoken here: send HTTP/1.1")
        self._method = method = parser.get_method().decode("latin-1")
        self._keep = parser.should_keep_alive()
        self._headers_read(len(method) + 12)  # `METHOD TARGET HTTP/1.1` and CRLF; the target is counted
        headers = self._headers
        self._chunked = "transfer-encoding" in headers  # llhttp takes no other coding than a final chunked
        length = headers.get("content-length")
        if length is not None and int(length) > self.max_body_bytes:
            raise BadMessage(413, _over(int(length), self.max_body_bytes))
        if parser.should_upgrade():  # Upgrade or CONNECT: answered as HTTP/1.1, then the connection closes
            if self._chunked or (length or "0") != "0":
                raise BadMessage(400, "a request asking to upgrade the connection may not have a body")
            self._keep = False
        if "expect" in headers:
            self.expecting = headers["expect"].lower() == "100-continue"

    def on_message_complete(self) -> None:
        target, self._target = self._target.decode("latin-1"), b""
        headers, self._headers = self._headers, {}
        self.expecting = False
        if self._unseen is not None:  # the one request of the read, framed by its Content-Length
            seen = {name: value for name, value in headers.items() if name != "content-length"}
            self._remember((self._method, target, seen, self._keep))
        self.ready.append((self._method, target, headers, self._whole(), self._keep))


class AnswerReader(_Reader):
    """Read a server's answers to requests sent one at a time (their headers are not kept)."""

    kind = "answer"
    seen_heads: Memo[bytes, tuple[int, bool]] = Memo(MAX_SEEN_HEADS)  # status, keep-alive

    def __init__(self) -> None:
        super().__init__(None, httptools.HttpResponseParser)
        self.surplus = False  # bytes of another answer followed one: the connection is unusable
        self._answer: Answer | None = None
        self._sized = False  # the answer being read has a Content-Length
        self._status = 0
        self._keep = True

    def feed(self, data: bytes) -> Answer | None:
        """Read bytes from the connection; return the answer they complete, else None (1xx ones are skipped)."""
        if self.done:
            return None
        if not self.started and (found := self._lookup(data)) is not None:
            (status, keep), _, body = found
            self._read_seen(data, _answer(status, data[body:], keep))
        else:
            self._feed(data)
        answer, self._answer = self._answer, None
        return answer

    def _seen_complete(self) -> None:
        self._answer = self._seen  # type: ignore[assignment]

    def end(self) -> Answer | None:
        """Return the answer the connection's end completes (one without length: its body ends there), else None."""
        if self._in_head or self._chunked or self._sized:
            return None
        return _answer(self._status, self._whole(), False)

    def on_message_begin(self) -> None:
        self.started = True
        if self._answer is not None:
            self.surplus = True

    def on_header(self, name: bytes, value: bytes) -> None:
        self._counted += len(name) + len(value) + 4  # `name: value` and CRLF
        if len(name) == 14 and name.lower() == b"content-length":
            self._sized = True
        elif len(name) == 17 and name.lower() == b"transfer-encoding":
            self._chunked = True  # llhttp takes no other coding than a final chunked

    def on_headers_complete(self) -> None:
        parser = self.parser
        version = parser.get_http_version()
        if version not in VERSIONS:
            raise BadMessage(400, f"HTTP/{version} answers are not read here")
        self._status = parser.get_status_code()
        self._keep = parser.should_keep_alive()
        self._headers_read(15)  # `HTTP/1.1 200 ` and CRLF (the reason is not counted)

    def on_message_complete(self) -> None:
        body = self._whole()
        self._sized = False
        status = self._status
        if 100 <= status < 200:
            return  # an interim answer: the final one follows
        if self._unseen is not None and status not in NO_BODY_STATUSES:  # framed by its Content-Length
            self._remember((status, self._keep))
        self._answer = _answer(status, body, self._keep)


def _one_whole(data: bytes) -> tuple[int, int, int] | None:
    """Return where the Content-Length line starts and ends and where the head ends, when `data` is one
    whole message of a small head with `Content-Length` (as most clients spell it), else None.
    """
    end = data.find(b"\r\n\r\n", 0, MAX_SEEN_HEAD_BYTES)
    if end < 0:
        return None
    at = data.find(b"\r\nContent-Length:", 0, end)
    if at < 0:
        return None
    stop = data.find(b"\r\n", at + 2, end + 2)
    text = data[at + 17 : stop].strip()
    if not text.isdigit() or int(text) != len(data) - end - 4:
        return None  # not one whole message, or a length llhttp tells what is wrong with
    return at, stop, end


def _over(length: int, limit: int) -> str:
    return f"the body ({length} bytes) is over the gateway's {limit} bytes"


# header names as they come -> lowercased: callers send the same few
_names: Memo[bytes, str] = Memo(1024)
