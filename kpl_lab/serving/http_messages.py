"""Read HTTP/1.x messages from bytes as they arrive: the head, then a Content-Length, chunked or till-close body.

The gateway process's server reads requests with it and its client reads the replicas'
answers with it, both from asyncio protocols' `data_received`: no stream, task or future
per message, so a kept-alive connection costs a parse and two writes per request. A
kept-alive caller sends the same head each time but for its Content-Length: such a head is
parsed once (`_seen_heads`, shared by every reader) and only its length read again; a message
that one read brings whole is taken from that read without the buffer.
"""

from __future__ import annotations

from dataclasses import dataclass

from .memo import Memo

MAX_HEAD_BYTES = 64 * 1024
MAX_SEEN_HEAD_BYTES = 4096  # heads up to this size are remembered (as parsed) ...
MAX_SEEN_HEADS = 256  # ... this many of them: a kept-alive caller sends the same head each time
NO_BODY_STATUSES = (204, 304)


class BadMessage(Exception):
    """The message cannot be read; `status` says why (400, 413, 431)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(slots=True)
class Message:
    """One whole message: its start line's three parts, headers (names lowercased) and body."""

    start: tuple[str, str, str]  # request: method, target, version; answer: version, status, reason
    headers: dict[str, str]
    body: bytes
    keep: bool  # the connection may carry another message

    def header(self, name: str) -> str | None:
        """Return a header's value by any spelling of its name."""
        return self.headers.get(name.lower())


# (reading answers, a head without its Content-Length line) -> (start, headers, keep) parsed from it
_seen_heads: Memo[tuple[bool, bytes], tuple[tuple[str, str, str], dict[str, str], bool]] = Memo(
    MAX_SEEN_HEADS
)


class MessageReader:
    """Collect bytes of one connection and hand out each message once it is whole."""

    def __init__(self, max_body_bytes: int | None, answers: bool = False) -> None:
        self.max_body_bytes = max_body_bytes
        self.answers = answers  # reading a server's answers (else a client's requests)
        self.buffer = bytearray()
        self.head: tuple[tuple[str, str, str], dict[str, str], bool] | None = None  # start, headers, keep
        self._length: int | None = None  # Content-Length body; None with _chunks None: till close
        self._chunks: list[bytes] | None = None
        self._chunked_bytes = 0
        self._trailers = False  # the zero-size chunk was read: trailers up to an empty line come

    def expects_continue(self) -> bool:
        """Say whether the message read so far waits for `100 Continue` before its body."""
        return self.head is not None and self.head[1].get("expect", "").lower() == "100-continue"

    def feed(self, data: bytes) -> None:
        """Add bytes read from the connection (to read later)."""
        self.buffer += data

    def next(self, data: bytes = b"") -> Message | None:
        """Add bytes read from the connection; return the next whole message, or None until more come.

        Raise BadMessage for a message that cannot be read.
        """
        if data and not self.buffer and self.head is None:
            message = self._whole(data)  # the common case: one read brought one whole message
            if message is not None:
                return message
        elif data:
            self.buffer += data
        if self.head is None:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > MAX_HEAD_BYTES:
                    raise BadMessage(431, f"the head is over {MAX_HEAD_BYTES} bytes")
                return None
            self._read_head(bytes(self.buffer[:end]))
            del self.buffer[: end + 4]
        if self._chunks is not None:
            body = self._read_chunks()
            if body is None:
                return None
        elif self._length is not None:
            length = self._length
            if len(self.buffer) < length:
                return None
            if len(self.buffer) == length:  # the common case: nothing sent ahead
                body = bytes(self.buffer)
                self.buffer.clear()
            else:
                body = bytes(self.buffer[:length])
                del self.buffer[:length]
        else:
            return None  # till close: `end` hands it out
        return self._done(body)

    def _whole(self, data: bytes) -> Message | None:
        """Return the message that `data` holds, when it holds one whole Content-Length message and no more.

        Anything else goes to the buffer (None) and is read from there.
        """
        end = data.find(b"\r\n\r\n")
        if end >= 0:
            self._read_head(data[:end])
            if self._chunks is None and self._length == len(data) - end - 4:
                return self._done(data[end + 4 :])
            self.buffer += data[end + 4 :]
        else:
            self.buffer += data
        return None

    def end(self) -> Message | None:
        """Return the message that the connection's end completes (a till-close body), else None."""
        if self.head is not None and self._length is None and self._chunks is None:
            body = bytes(self.buffer)
            self.buffer.clear()
            return self._done(body)
        return None

    def partial(self) -> bool:
        """Say whether bytes of an unfinished message were read."""
        return self.head is not None or bool(bytes(self.buffer).strip())

    def _read_head(self, head: bytes) -> None:
        """Read a head: a head seen lately but for its Content-Length is not parsed again."""
        at = head.find(b"\r\nContent-Length:")  # as most clients spell it; else any spelling
        if at < 0:
            at = head.lower().find(b"\r\ncontent-length:")
        if at < 0 or len(head) > MAX_SEEN_HEAD_BYTES:
            self._start(head.decode("latin-1"))
            return
        stop = head.find(b"\r\n", at + 2)
        stop = len(head) if stop < 0 else stop
        key = (self.answers, head[:at] + head[stop:])
        seen = _seen_heads.get(key)
        if seen is None:
            if self._start(head.decode("latin-1")):
                start, headers, keep = self.head  # type: ignore[misc]
                _seen_heads.remember(
                    key, (start, dict(headers), keep)
                )  # a copy: the message's own may change
            return
        start, headers, keep = seen
        length = head[at + 17 : stop].decode("latin-1").strip()
        self.head = (start, {**headers, "content-length": length}, keep)
        self._length = self._content_length(length)

    def _start(self, text: str) -> bool:
        """Parse a head; return whether its Content-Length alone sets where the body ends."""
        lines = text.split("\r\n")
        parts = lines[0].split(" ", 2)
        if self.answers:
            version = parts[0]
            if not version.startswith("HTTP/1.") or len(parts) < 2 or not parts[1].isdigit():
                raise BadMessage(400, f"not an HTTP/1.x status line: {lines[0][:100]!r}")
            parts = [*parts, ""][:3]
        else:
            version = parts[2] if len(parts) == 3 else ""
            if not version.startswith("HTTP/1.") or " " in version:
                raise BadMessage(400, f"not an HTTP/1.x request line: {lines[0][:100]!r}")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon or not name or name != name.strip():
                raise BadMessage(400, f"malformed header line: {line[:100]!r}")
            name = name.lower()
            headers[name] = f"{headers[name]}, {value.strip()}" if name in headers else value.strip()
        connection = headers.get("connection", "").lower()
        keep = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
        self.head = ((parts[0], parts[1], parts[2]), headers, keep)
        status = int(parts[1]) if self.answers else 0
        if status in NO_BODY_STATUSES or 100 <= status < 200:
            self._length = 0
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._chunks, self._chunked_bytes, self._trailers = [], 0, False
        elif "content-length" in headers:
            self._length = self._content_length(headers["content-length"])
            return True
        elif not self.answers:
            self._length = 0  # a request without either has no body
        else:
            self.head = (self.head[0], headers, False)  # the body ends when the server closes
        return False

    def _content_length(self, text: str) -> int:
        try:
            length = int(text)
        except ValueError:
            raise BadMessage(400, f"Content-Length is not a number: {text!r}") from None
        if length < 0:
            raise BadMessage(400, f"Content-Length is negative: {length}")
        if self.max_body_bytes is not None and length > self.max_body_bytes:
            raise BadMessage(
                413, f"the body ({length} bytes) is over the gateway's {self.max_body_bytes} bytes"
            )
        return length

    def _read_chunks(self) -> bytes | None:
        """Take whole chunks off the buffer; return the body after the last chunk and trailers."""
        chunks = self._chunks
        assert chunks is not None
        while True:
            end = self.buffer.find(b"\r\n")
            if end < 0:
                return None
            line = bytes(self.buffer[:end])
            if self._trailers:
                del self.buffer[: end + 2]
                if not line:
                    return b"".join(chunks)
                continue
            try:
                size = int(line.split(b";", 1)[0], 16)
            except ValueError:
                shown = (line + b"\r\n")[:40]
                raise BadMessage(400, f"malformed chunk size: {shown!r}") from None
            if size == 0:
                del self.buffer[: end + 2]
                self._trailers = True
                continue
            if len(self.buffer) < end + 2 + size + 2:
                return None
            if self.max_body_bytes is not None and self._chunked_bytes + size > self.max_body_bytes:
                raise BadMessage(413, f"the chunked body is over the gateway's {self.max_body_bytes} bytes")
            if self.buffer[end + 2 + size : end + 4 + size] != b"\r\n":
                raise BadMessage(400, "a chunk does not end with CRLF")
            chunks.append(bytes(self.buffer[end + 2 : end + 2 + size]))
            self._chunked_bytes += size
            del self.buffer[: end + 4 + size]

    def _done(self, body: bytes) -> Message:
        assert self.head is not None
        start, headers, keep = self.head
        self.head, self._length, self._chunks = None, None, None
        return Message(start, headers, body, keep)
