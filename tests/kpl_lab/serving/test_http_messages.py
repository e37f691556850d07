"""Reading HTTP/1.x messages from bytes as they arrive: every framing, any split, bad messages."""

from __future__ import annotations

import pytest

from kpl_lab.serving.http_messages import MAX_HEAD_BYTES, BadMessage, MessageReader

REQUESTS = (
    b"POST /a?x=1 HTTP/1.1\r\nHost: h\r\nX-A: one\r\nX-A: two\r\nContent-Length: 5\r\n\r\nhello"
    b"POST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n3;ext=1\r\ncde\r\n0\r\nT: 1\r\n\r\n"
    b"GET /c HTTP/1.0\r\n\r\n"
)
ANSWERS = (
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
    b'HTTP/1.1 400 Bad Request\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{"b"\r\n4\r\n: 2}\r\n0\r\n\r\n'
    b"HTTP/1.1 204 No Content\r\n\r\n"
    b'HTTP/1.0 200 OK\r\n\r\n{"till": "close"}'
)


def _read(data: bytes, answers: bool, step: int) -> list:
    """Feed `data` `step` bytes at a time; return (start, body, keep) of every message, the till-close one last."""
    reader, found = MessageReader(1024, answers=answers), []
    for at in range(0, len(data), step):
        message = reader.next(data[at : at + step])
        while message is not None:
            found.append((message.start, message.body, message.keep, message.header("x-a")))
            message = reader.next()
    if (last := reader.end()) is not None:
        found.append((last.start, last.body, last.keep, last.header("x-a")))
    return found


@pytest.mark.parametrize("step", [1, 2, 7, 1 << 20])
def test_requests_read_the_same_however_the_bytes_arrive(step):
    assert _read(REQUESTS, False, step) == [
        (("POST", "/a?x=1", "HTTP/1.1"), b"hello", True, "one, two"),
        (("POST", "/b", "HTTP/1.1"), b"abcde", True, None),
        (("GET", "/c", "HTTP/1.0"), b"", False, None),
    ]


@pytest.mark.parametrize("step", [1, 3, 1 << 20])
def test_answers_in_every_framing_read_the_same_however_the_bytes_arrive(step):
    assert [(start[1], body, keep) for start, body, keep, _ in _read(ANSWERS, True, step)] == [
        ("200", b"{}", True),
        ("400", b'{"b": 2}', True),
        ("204", b"", True),
        ("200", b'{"till": "close"}', False),
    ]


def test_an_unfinished_message_is_partial_and_a_finished_stream_is_not():
    reader = MessageReader(1024)
    assert not reader.partial()
    assert reader.next(b"POST / HTTP/1.1\r\nContent-Length: 4\r\n\r\nab") is None
    assert reader.partial() and reader.end() is None
    assert reader.next(b"cd").body == b"abcd" and not reader.partial()


def test_expect_100_continue_is_seen_once_the_head_is_read():
    reader = MessageReader(1024)
    assert reader.next(b"POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n") is None
    assert reader.expects_continue()


@pytest.mark.parametrize(
    ("data", "status", "message"),
    [
        (b"x" * (MAX_HEAD_BYTES + 1), 431, f"the head is over {MAX_HEAD_BYTES} bytes"),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 17\r\n\r\n",
            413,
            "the body (17 bytes) is over the gateway's 16 bytes",
        ),
        (b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400, "Content-Length is negative: -1"),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n9\r\n123456789\r\n9\r\n123456789\r\n",
            413,
            "the chunked body is over the gateway's 16 bytes",
        ),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXY",
            400,
            "a chunk does not end with CRLF",
        ),
        (b"POST / HTTP/2\r\n\r\n", 400, "not an HTTP/1.x request line: 'POST / HTTP/2'"),
    ],
)
def test_bad_requests_say_what_is_wrong(data, status, message):
    reader = MessageReader(16)
    with pytest.raises(BadMessage) as bad:
        reader.next(data)
    assert (bad.value.status, str(bad.value)) == (status, message)


def test_an_answer_that_is_not_http_is_refused():
    reader = MessageReader(None, answers=True)
    with pytest.raises(BadMessage, match="not an HTTP/1.x status line"):
        reader.next(b"SSH-2.0-OpenSSH\r\n\r\n")


def test_a_head_seen_before_but_for_its_length_is_read_with_its_own_length():
    """Heads that differ only in Content-Length are parsed once; each message keeps its own length."""
    reader = MessageReader(16)
    head = b"POST /p HTTP/1.1\r\nHost: h\r\nX-A: one\r\nContent-Length: %d\r\n\r\n"
    first = reader.next(head % 5 + b"hello")
    first.headers["x-a"] = "changed"  # a message's headers are its own
    second = reader.next(head % 3 + b"abc")
    assert (first.body, second.body) == (b"hello", b"abc")
    assert second.headers == {"host": "h", "x-a": "one", "content-length": "3"}
    with pytest.raises(BadMessage, match="over the gateway's 16 bytes"):
        reader.next(head % 17)
    for text in (b"x", b"-1"):
        with pytest.raises(BadMessage, match="Content-Length is"):
            MessageReader(16).next(head.replace(b"%d", text))


def test_an_answer_without_a_body_stays_without_one_when_its_head_comes_again():
    reader = MessageReader(None, answers=True)
    no_content = b"HTTP/1.1 204 No Content\r\nContent-Length: 2\r\n\r\n"
    found = [reader.next(no_content), reader.next(no_content)]
    assert [(m.start[1], m.body) for m in found] == [("204", b""), ("204", b"")]
