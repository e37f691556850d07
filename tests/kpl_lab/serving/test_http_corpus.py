"""An RFC 9112 corpus against the gateway's HTTP server: raw bytes over a real socket, the status, then the close.

Each refused request gets its error and the connection is closed after it; requests sent
before it on the same connection are answered first. Broken multipart forms go to the
gateway process's own handler (`GatewayApp`), which refuses them before any replica is asked.
"""

from __future__ import annotations

import asyncio
import json
import select
import socket
import threading

import pytest
from traitlets.config import Config

from kpl_lab.platform import Platform
from kpl_lab.serving import gateway_process, http_server
from kpl_lab.serving.http_messages import MAX_HEAD_BYTES, MAX_LINE_BYTES

LIMIT = 1024  # bodies the server under test takes
WAIT = 30.0  # seconds a socket waits for the server: a hang fails the test instead of stopping it
CL_TE = "Transfer-Encoding can't be present with Content-Length"


def _echo(request: http_server.Request) -> http_server.Response:
    document = {"method": request.method, "target": request.target, "body": request.body.decode("latin-1")}
    return http_server.json_response(200, document)


class _Served:
    """A handler served by `http_server` on an event loop of its own thread."""

    def __init__(self, handler: http_server.Handler) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        serving = http_server.serve(handler, "127.0.0.1", 0, LIMIT)
        self.server = asyncio.run_coroutine_threadsafe(serving, self.loop).result(WAIT)
        self.port = self.server.sockets[0].getsockname()[1]

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(WAIT)
        self.loop.close()


@pytest.fixture(scope="module")
def port():
    served = _Served(_echo)
    yield served.port
    served.close()


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=WAIT)


def _until_closed(sock: socket.socket) -> bytes:
    """Read everything the server sends until it closes the connection."""
    raw = b""
    try:
        while chunk := sock.recv(65536):
            raw += chunk
    except ConnectionResetError:  # it closed with bytes of ours unread: what it sent before is kept
        pass
    sock.close()
    return raw


def _answers(raw: bytes) -> list[tuple[int, dict]]:
    """Split a stream of Content-Length answers into (status, JSON body)."""
    found = []
    while raw:
        head, _, raw = raw.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers["content-length"])
        found.append((int(lines[0].split(" ")[1]), json.loads(raw[:length])))
        raw = raw[length:]
    return found


def _exchange(port: int, data: bytes, end: bool = False) -> list[tuple[int, dict]]:
    """Send `data` on one connection (then end it when `end`); return the answers up to its close.

    That the server closes it (the read ends) is part of every check.
    """
    sock = _connect(port)
    sock.sendall(data)
    if end:
        sock.shutdown(socket.SHUT_WR)
    return _answers(_until_closed(sock))


def _refused(port: int, data: bytes, end: bool = False) -> tuple[int, str]:
    """Send a request the server refuses; return its status and message (it is the one answer)."""
    ((status, body),) = _exchange(port, data, end)
    return status, body["message"]


def _streamed(port: int, start: bytes, filler: bytes, most: int = 4 << 20) -> tuple[int, str]:
    """Send `start`, then `filler` until the server answers (at most `most` bytes); return its status and message."""
    sock = _connect(port)
    sock.sendall(start)
    sent = 0
    try:
        while sent < most and not select.select([sock], [], [], 0)[0]:
            sock.sendall(filler)
            sent += len(filler)
    except (BrokenPipeError, ConnectionResetError):
        pass  # it closed while we sent: its answer came before
    ((status, body),) = _answers(_until_closed(sock))
    assert sent < most, "the server read on and never answered"
    return status, body["message"]


POST = b"POST /p HTTP/1.1\r\nHost: h\r\n"
CHUNKED = POST + b"Transfer-Encoding: chunked\r\n\r\n"

REFUSED = {
    # framing that two readers could read two ways (RFC 9112 6.1, 6.3): request smuggling
    "CL then TE": (POST + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", CL_TE),
    "TE then CL": (
        POST + b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
        "Content-Length can't be present with Transfer-Encoding",
    ),
    "two Content-Lengths": (
        POST + b"Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
        "Duplicate Content-Length",
    ),
    "two equal Content-Lengths": (
        POST + b"Content-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
        "Duplicate Content-Length",
    ),
    "a list for Content-Length": (
        POST + b"Content-Length: 3, 3\r\n\r\nabc",
        "Invalid character in Content-Length",
    ),
    "a negative Content-Length": (
        POST + b"Content-Length: -1\r\n\r\n",
        "Invalid character in Content-Length",
    ),
    "a signed Content-Length": (
        POST + b"Content-Length: +3\r\n\r\nabc",
        "Invalid character in Content-Length",
    ),
    "a Content-Length that is no number": (
        POST + b"Content-Length: x\r\n\r\n",
        "Invalid character in Content-Length",
    ),
    "a Content-Length that overflows": (
        POST + b"Content-Length: 99999999999999999999\r\n\r\n",
        "Content-Length overflow",
    ),
    "chunked, then gzip": (
        POST + b"Transfer-Encoding: chunked, gzip\r\n\r\n",
        "Invalid `Transfer-Encoding` header value",
    ),
    "gzip alone": (POST + b"Transfer-Encoding: gzip\r\n\r\nabc", "Request has invalid `Transfer-Encoding`"),
    "xchunked": (
        POST + b"Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n",
        "Request has invalid `Transfer-Encoding`",
    ),
    "Transfer-Encoding twice": (
        POST + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "Invalid `Transfer-Encoding` header value",
    ),
    "a space before Transfer-Encoding's colon": (
        POST + b"Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n",
        "Invalid header field char",
    ),
    # chunked bodies
    "a chunk size that is not hex": (CHUNKED + b"zz\r\nab\r\n0\r\n\r\n", "Invalid character in chunk size"),
    "a chunk size that overflows": (CHUNKED + b"f" * 70_000 + b"\r\n", "Chunk size overflow"),
    "a space after a chunk size": (CHUNKED + b"2 \r\nab\r\n0\r\n\r\n", "Invalid character in chunk size"),
    "a chunk without its CRLF": (CHUNKED + b"2\r\nabXY0\r\n\r\n", "Expected LF after chunk data"),
    "a last chunk ended by a bare LF": (CHUNKED + b"2\r\nab\r\n0\r\n\n", "Invalid header field char"),
    # header lines
    "obs-fold": (
        POST + b"X-A: one\r\n two\r\nContent-Length: 0\r\n\r\n",
        "Unexpected whitespace after header value",
    ),
    "a space before the colon": (POST + b"X-A : one\r\n\r\n", "Invalid header token"),
    "NUL in a value": (POST + b"X-A: o\x00ne\r\n\r\n", "Invalid header value char"),
    "NUL in a name": (POST + b"X\x00A: one\r\n\r\n", "Invalid header token"),
    "a bare CR in a value": (POST + b"X-A: o\rne\r\n\r\n", "Missing expected LF after header value"),
    "a bare LF after a value": (POST + b"X-A: one\n\r\n", "Missing expected CR after header value"),
    "a name that is no token": (POST + b"X(A): one\r\n\r\n", "Invalid header token"),
    "an empty name": (POST + b": one\r\n\r\n", "Invalid header token"),
    "lines ended by LF alone": (b"POST /p HTTP/1.1\nContent-Length: 0\n\n", "Expected CRLF after version"),
    # request lines
    "HTTP/0.9": (b"GET /p\r\n\r\n", "HTTP/0.9 is not spoken here: send HTTP/1.1"),
    "HTTP/2.0": (b"GET /p HTTP/2.0\r\n\r\n", "HTTP/2.0 is not spoken here: send HTTP/1.1"),
    "HTTP/1.2": (b"GET /p HTTP/1.2\r\n\r\n", "Invalid HTTP version"),
    "HTTP/3.0": (b"GET /p HTTP/3.0\r\n\r\n", "Invalid HTTP version"),
    "HTTP/2's preface": (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "Pause on PRI/Upgrade"),
    "a method in lowercase": (b"post /p HTTP/1.1\r\n\r\n", "Invalid method encountered"),
    "no request line": (b"NONSENSE\r\n\r\n", "Invalid method encountered"),
    "a space in the target": (b"GET /a b HTTP/1.1\r\n\r\n", "Expected HTTP/, RTSP/ or ICE/"),
    "a control character in the target": (b"GET /a\x01b HTTP/1.1\r\n\r\n", "Invalid char in url path"),
    "an upgrade with a body": (
        POST + b"Connection: upgrade\r\nUpgrade: h2c\r\nContent-Length: 3\r\n\r\nabc",
        "a request asking to upgrade the connection may not have a body",
    ),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_a_request_read_two_ways_or_malformed_gets_400_and_the_connection_closes(port, name):
    data, reason = REFUSED[name]
    status, message = _refused(port, data)
    assert status == 400
    assert message in (reason, f"malformed request: {reason}")


def test_a_head_over_the_limit_gets_431(port):
    many = b"".join(b"X-H%05d: %s\r\n" % (n, b"v" * 100) for n in range(700))  # 70 KB
    assert _refused(port, b"GET /p HTTP/1.1\r\n" + many + b"\r\n") == (
        431,
        f"the head is over {MAX_HEAD_BYTES} bytes",
    )
    one = b"GET /p HTTP/1.1\r\nX-Long: " + b"v" * 70_000 + b"\r\n\r\n"
    assert _refused(port, one)[0] == 431


@pytest.mark.parametrize(
    ("start", "filler"),
    [
        (b"GET /", b"a" * 8192),  # a request line that never ends
        (b"GET /p HTTP/1.1\r\nX-Long: ", b"v" * 8192),  # a header line that never ends
        (b"GET /p HTTP/1.1\r\nX-Long", b"n" * 8192),  # a header name that never ends
        (b"GET /p HTTP/1.1\r\n", b"X-Many: v\r\n" * 800),  # header lines that never end
    ],
    ids=["request line", "header line", "header name", "header lines"],
)
def test_a_head_that_never_ends_gets_431_once_it_is_over_the_limit(port, start, filler):
    assert _streamed(port, start, filler) == (431, f"the head is over {MAX_HEAD_BYTES} bytes")


@pytest.mark.parametrize(
    "start",
    [
        CHUNKED + b"0",  # a chunk size of zeros that never ends
        CHUNKED + b"1;ext=",  # a chunk extension that never ends
        CHUNKED + b"2\r\nab\r\n1;",  # the same after a chunk
        CHUNKED + b"0\r\nX-Trailer: ",  # a trailer that never ends
    ],
    ids=["zeros", "extension", "extension after a chunk", "trailer"],
)
def test_a_chunk_size_line_that_never_ends_gets_400(port, start):
    assert _streamed(port, start, b"0" * 8192) == (
        400,
        f"a chunk-size or trailer line is over {MAX_LINE_BYTES} bytes",
    )


def test_a_long_chunk_size_line_in_one_read_gets_400(port):
    status, message = _refused(port, CHUNKED + b"1;" + b"e" * 70_000 + b"\r\nx\r\n0\r\n\r\n")
    assert (status, message) == (400, f"a chunk-size or trailer line is over {MAX_LINE_BYTES} bytes")


def test_a_request_cut_short_gets_400_when_the_caller_ends(port):
    for data in (
        CHUNKED + b"2\r\nab\r\n0\r\n",
        CHUNKED + b"2\r\na",
        POST + b"Content-Length: 5\r\n\r\nab",
        b"GE",
    ):
        assert _refused(port, data, end=True) == (400, "the request ended before it was whole")


def test_bodies_over_the_limit_get_413_without_being_sent(port):
    sock = _connect(port)
    sock.sendall(POST + b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % (LIMIT + 1))
    ((status, body),) = _answers(_until_closed(sock))  # answered, and closed, with no body sent
    assert (status, body["message"]) == (
        413,
        f"the body ({LIMIT + 1} bytes) is over the gateway's {LIMIT} bytes",
    )
    chunks = CHUNKED + b"200\r\n" + b"a" * 512 + b"\r\n" + b"201\r\n" + b"b" * 513 + b"\r\n0\r\n\r\n"
    assert _refused(port, chunks) == (413, f"the chunked body is over the gateway's {LIMIT} bytes")


def test_a_request_hidden_in_a_body_is_a_body(port):
    hidden = b"GET /hidden HTTP/1.1\r\nHost: h\r\n\r\n"
    data = POST + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(hidden) + hidden
    assert [(s, b["target"], b["body"]) for s, b in _exchange(port, data)] == [(200, "/p", hidden.decode())]
    # a chunked body hiding a request after a zero-size chunk of its own: the rest is the next request
    data = CHUNKED + b"5\r\n0\r\n\r\n\r\n0\r\n\r\n" + hidden
    answers = _exchange(port, data, end=True)
    assert [(s, b["target"], b["body"]) for s, b in answers] == [
        (200, "/p", "0\r\n\r\n"),
        (200, "/hidden", ""),
    ]


def test_requests_before_a_bad_one_are_answered_then_the_error_then_the_close(port):
    good = POST + b"Content-Length: 2\r\n\r\nok"
    data = good + good + POST + b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n" + good
    answers = _exchange(port, data)
    assert [(s, b.get("body"), b.get("message")) for s, b in answers] == [
        (200, "ok", None),
        (200, "ok", None),
        (400, None, f"malformed request: {CL_TE}"),
    ]


def test_an_upgrade_without_a_body_is_answered_as_http_1_1_and_the_connection_closes(port):
    data = b"GET /u HTTP/1.1\r\nConnection: upgrade\r\nUpgrade: h2c\r\n\r\nGET /after HTTP/1.1\r\n\r\n"
    assert [(s, b["target"]) for s, b in _exchange(port, data)] == [(200, "/u")]


# what is taken


def test_kept_alive_pipelined_chunked_and_continued_requests_are_answered_in_order(port):
    sock = _connect(port)
    sock.sendall(
        POST
        + b"Content-Length: 5\r\n\r\nhello"
        + CHUNKED
        + b"2;name=value\r\nab\r\n3\r\ncde\r\n0\r\nX-Trailer: t\r\n\r\n"
        + b"GET /c HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
    )
    raw = b""
    while raw.count(b"HTTP/1.1 200") < 3:
        raw += sock.recv(65536)
    assert [(b["method"], b["body"]) for _, b in _answers(raw)] == [
        ("POST", "hello"),
        ("POST", "abcde"),
        ("GET", ""),
    ]
    # the connection is still open: a caller that waits for `100 Continue` gets it, then its answer
    sock.sendall(POST + b"Expect: 100-continue\r\nContent-Length: 2\r\n\r\n")
    assert sock.recv(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"
    sock.sendall(b"ok")
    raw = b""
    while not raw.endswith(b"}"):
        raw += sock.recv(65536)
    assert _answers(raw)[0][1]["body"] == "ok"
    sock.sendall(b"GET /last HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert [b["target"] for _, b in _answers(_until_closed(sock))] == ["/last"]


def test_many_requests_in_one_write_are_all_answered_in_order(port):
    data = b"".join(b"POST /%d HTTP/1.1\r\nContent-Length: 1\r\n\r\nx" % n for n in range(500))
    answers = _exchange(port, data + b"GET /end HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert [b["target"] for _, b in answers] == [f"/{n}" for n in range(500)] + ["/end"]


def test_a_request_line_after_empty_lines_is_read(port):
    assert [
        b["target"] for _, b in _exchange(port, b"\r\n\r\nGET /x HTTP/1.1\r\nConnection: close\r\n\r\n")
    ] == ["/x"]


# broken multipart forms, refused by the gateway process's handler


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    """Serve a `GatewayApp` of a fresh platform; yield (port, a Jupyter server's token it takes)."""
    home = tmp_path_factory.mktemp("corpus") / "home"
    platform = Platform(home=str(home), config=Config({"Ledger": {"cpu": 4.0, "memory": 4096}}))
    app = gateway_process.GatewayApp(platform)
    token = "corpus-token"
    registered = gateway_process.register_server(home, token, [])
    served = _Served(app.handle)
    yield served.port, token
    served.close()
    registered.unlink()
    app.close()


FORM = (
    b'Content-Disposition: form-data; name="file"; filename="a.png"\r\nContent-Type: image/png\r\n\r\nimg\r\n'
)
FORMS = {
    "no boundary": (
        b"multipart/form-data",
        b"--xyz\r\n" + FORM + b"--xyz--\r\n",
        "multipart boundary not found",
    ),
    "a boundary never closed": (
        b"multipart/form-data; boundary=xyz",
        b"--xyz\r\n" + FORM,
        "no final boundary found",
    ),
    "a part without headers": (
        b"multipart/form-data; boundary=xyz",
        b"--xyz\r\nimg\r\n--xyz--\r\n",
        "missing headers",
    ),
    "a part without a name": (
        b"multipart/form-data; boundary=xyz",
        b'--xyz\r\nContent-Disposition: form-data; filename="a.png"\r\n\r\nimg\r\n--xyz--\r\n',
        "missing name",
    ),
    "no file": (
        b"multipart/form-data; boundary=xyz",
        b'--xyz\r\nContent-Disposition: form-data; name="text"\r\n\r\nhello\r\n--xyz--\r\n',
        "the multipart body holds no file",
    ),
}


@pytest.mark.parametrize("name", list(FORMS))
def test_a_broken_multipart_form_gets_400_naming_the_problem(gateway, name):
    port, token = gateway
    content_type, body, problem = FORMS[name]
    request = (
        b"POST /kpl/api/deployments/any/predict HTTP/1.1\r\nAuthorization: token %s\r\nContent-Type: %s\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (token.encode(), content_type, len(body), body)
    )
    ((status, error),) = _exchange(port, request)
    assert (status, error["error"], error["field"]) == (400, "BadRequest", "file")
    assert problem in error["message"]
