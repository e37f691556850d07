"""Reading HTTP/1.1 messages with llhttp: every framing, any split, bad messages, heads read before."""

from __future__ import annotations

import pytest

from kpl_lab.serving.http_messages import (
    MAX_HEAD_BYTES,
    MAX_LINE_BYTES,
    AnswerReader,
    BadMessage,
    RequestReader,
)

REQUESTS = (
    b"POST /a?x=1 HTTP/1.1\r\nHost: h\r\nX-A: one\r\nX-A: two \r\nContent-Length: 5\r\n\r\nhello"
    b"POST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n3;ext=1\r\ncde\r\n0\r\nT: 1\r\n\r\n"
    b"GET /c HTTP/1.0\r\n\r\n"
)
ANSWERS = (
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}",
    b'HTTP/1.1 400 Bad Request\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{"b"\r\n4\r\n: 2}\r\n0\r\n\r\n',
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
    b'HTTP/1.0 200 OK\r\n\r\n{"till": "close"}',
)


def _requests(data: bytes, step: int, limit: int = 1024) -> list:
    """Feed `data` `step` bytes at a time; return every request read."""
    reader = RequestReader(limit)
    for at in range(0, len(data), step):
        reader.feed(data[at : at + step])
    return list(reader.ready)


@pytest.mark.parametrize("step", [1, 2, 7, 1 << 20])
def test_requests_read_the_same_however_the_bytes_arrive(step):
    found = [
        (method, target, body, keep, headers.get("x-a"))
        for method, target, headers, body, keep in _requests(REQUESTS, step)
    ]
    assert found == [
        ("POST", "/a?x=1", b"hello", True, "one, two"),
        ("POST", "/b", b"abcde", True, None),
        ("GET", "/c", b"", False, None),
    ]


@pytest.mark.parametrize("step", [1, 3, 1 << 20])
def test_answers_in_every_framing_read_the_same_however_the_bytes_arrive(step):
    reader, found = AnswerReader(), []
    for answer in ANSWERS:  # one request at a time: each answer comes after the last
        for at in range(0, len(answer), step):
            if (whole := reader.feed(answer[at : at + step])) is not None:
                found.append(whole)
    found.append(reader.end())  # the last one's body ends with the connection
    assert [tuple(answer) for answer in found] == [
        (200, b"{}", True),
        (400, b'{"b": 2}', True),
        (204, b"", True),  # after an interim 100, skipped
        (200, b'{"till": "close"}', False),
    ]


def test_an_answer_cut_short_is_no_answer_at_the_end():
    reader = AnswerReader()
    assert reader.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc") is None
    assert reader.end() is None
    chunked = AnswerReader()
    assert chunked.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n") is None
    assert chunked.end() is None


def test_an_unfinished_request_is_started_and_a_finished_one_is_not():
    reader = RequestReader(1024)
    assert not reader.started
    reader.feed(b"POST / HTTP/1.1\r\nContent-Length: 4\r\n\r\nab")
    assert reader.started and not reader.ready
    reader.feed(b"cd")
    assert reader.ready.popleft()[3] == b"abcd" and not reader.started


def test_expect_100_continue_is_seen_once_the_head_is_read():
    reader = RequestReader(1024)
    reader.feed(b"POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n")
    assert reader.expecting
    reader.feed(b"ok")
    assert not reader.expecting and reader.ready


@pytest.mark.parametrize(
    ("data", "status", "message"),
    [
        (
            b"POST / HTTP/1.1\r\nContent-Length: 17\r\n\r\n",
            413,
            "the body (17 bytes) is over the gateway's 16 bytes",
        ),
        (
            b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
            400,
            "malformed request: Invalid character in Content-Length",
        ),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n9\r\n123456789\r\n9\r\n123456789\r\n",
            413,
            "the chunked body is over the gateway's 16 bytes",
        ),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXY",
            400,
            "malformed request: Expected LF after chunk data",
        ),
        (b"POST / HTTP/2.0\r\n\r\n", 400, "HTTP/2.0 is not spoken here: send HTTP/1.1"),
        (b"GET /\r\n\r\n", 400, "HTTP/0.9 is not spoken here: send HTTP/1.1"),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            400,
            "malformed request: Transfer-Encoding can't be present with Content-Length",
        ),
        (
            b"POST / HTTP/1.1\r\nConnection: upgrade\r\nUpgrade: h2c\r\nContent-Length: 3\r\n\r\nabc",
            400,
            "a request asking to upgrade the connection may not have a body",
        ),
    ],
)
def test_bad_requests_say_what_is_wrong(data, status, message):
    reader = RequestReader(16)
    with pytest.raises(BadMessage) as bad:
        reader.feed(data)
    assert (bad.value.status, str(bad.value)) == (status, message)
    assert reader.done
    reader.feed(b"GET / HTTP/1.1\r\n\r\n")  # nothing more is read
    assert not reader.ready


@pytest.mark.parametrize("step", [100, 1000, 1 << 20])
def test_a_head_line_that_never_ends_is_over_the_head_limit_however_it_arrives(step):
    for start in (
        b"GET /" + b"a" * 40,
        b"GET / HTTP/1.1\r\nX-Long: " + b"v" * 40,
        b"GET / HTTP/1.1\r\nX-Long" + b"n" * 40,
    ):
        reader = RequestReader(1024)
        data = start + b"x" * (MAX_HEAD_BYTES + 2 * 4096)
        with pytest.raises(BadMessage) as bad:
            for at in range(0, len(data), step):
                reader.feed(data[at : at + step])
        assert (bad.value.status, str(bad.value)) == (431, f"the head is over {MAX_HEAD_BYTES} bytes")


def test_a_head_of_many_lines_over_the_limit_is_refused_and_one_under_it_read():
    lines = b"".join(b"X-%05d: %s\r\n" % (n, b"v" * 90) for n in range(MAX_HEAD_BYTES // 100 + 10))
    with pytest.raises(BadMessage, match="the head is over"):
        RequestReader(1024).feed(b"GET / HTTP/1.1\r\n" + lines + b"\r\n")
    under = lines[: len(lines) // 2 // 101 * 101]  # whole lines of 101 bytes
    reader = RequestReader(1024)
    reader.feed(b"GET / HTTP/1.1\r\n" + under + b"\r\n")
    assert len(reader.ready.popleft()[2]) == len(under) // 101


@pytest.mark.parametrize("line", [b"0" * (3 * MAX_LINE_BYTES) + b"1", b"1;" + b"e" * (3 * MAX_LINE_BYTES)])
def test_a_chunk_size_line_over_the_limit_is_refused_before_it_ends(line):
    reader = RequestReader(1 << 20)
    with pytest.raises(BadMessage) as bad:
        reader.feed(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + line)
    assert (bad.value.status, str(bad.value)) == (
        400,
        f"a chunk-size or trailer line is over {MAX_LINE_BYTES} bytes",
    )


def test_many_small_chunks_and_pipelined_requests_in_one_read_are_no_long_line():
    chunks = b"".join(b"1\r\n%c\r\n" % (97 + n % 26) for n in range(5000)) + b"0\r\n\r\n"
    many = b"GET /n HTTP/1.1\r\nHost: h\r\n\r\n" * 2000
    reader = RequestReader(1 << 20)
    reader.feed(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks + many)
    assert len(reader.ready) == 2001 and len(reader.ready[0][3]) == 5000


def test_a_head_seen_before_but_for_its_length_is_read_with_its_own_length():
    """Heads that differ only in Content-Length are read once; each request keeps its own length and body."""
    head = b"POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\nX-A: one\r\n\r\n"
    reader = RequestReader(16)
    reader.feed(head % 5 + b"hello")
    first = reader.ready.popleft()
    first[2]["x-a"] = "changed"  # a request's headers are its own
    for data in (head % 3 + b"abc", head % 0):
        reader.feed(data)
    second, third = reader.ready
    assert (first[3], second[3], third[3]) == (b"hello", b"abc", b"")
    assert second[2] == {"host": "h", "content-length": "3", "x-a": "one"}
    other = RequestReader(16)  # another connection: the head is found among every connection's
    other.feed(head % 2 + b"hi")
    assert other.ready.popleft()[:4] == (
        "POST",
        "/p",
        {"host": "h", "content-length": "2", "x-a": "one"},
        b"hi",
    )
    with pytest.raises(BadMessage, match="over the gateway's 16 bytes"):
        reader.feed(head % 17 + b"x" * 17)
    for text in (b"+3", b"3_"):  # llhttp still reads every byte of a head read before
        with pytest.raises(BadMessage, match="Content-Length"):
            RequestReader(16).feed(head.replace(b"%d", text) + b"abc")


def test_an_answer_without_a_body_stays_without_one_when_its_head_comes_again():
    reader = AnswerReader()
    no_content = b"HTTP/1.1 204 No Content\r\nContent-Length: 2\r\n\r\n"
    found = [reader.feed(no_content), reader.feed(no_content)]
    assert [(a.status, a.body) for a in found] == [(204, b""), (204, b"")]


def test_answers_that_are_not_http_1_or_come_unasked_are_noticed():
    with pytest.raises(BadMessage, match="malformed answer"):
        AnswerReader().feed(b"SSH-2.0-OpenSSH\r\n\r\n")
    with pytest.raises(BadMessage, match="HTTP/2.0 answers are not read here"):
        AnswerReader().feed(b"HTTP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n")
    reader = AnswerReader()
    answer = reader.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\naHTTP/1.1 200 OK\r\n")
    assert answer is not None and answer.body == b"a" and reader.surplus
