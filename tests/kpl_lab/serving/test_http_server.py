"""The gateway process's HTTP/1.1 server over real sockets: bodies, kept-alive connections, bad requests."""

from __future__ import annotations

import asyncio
import json

from kpl_lab.serving import http_server


async def _echo(request: http_server.Request) -> http_server.Response:
    return http_server.json_response(
        200,
        {
            "method": request.method,
            "target": request.target,
            "body": request.body.decode(),
            "x": request.header("X-A"),
        },
    )


async def _served(handler: http_server.Handler, data: bytes, max_body_bytes: int = 1024) -> bytes:
    """Serve `handler`, send raw bytes on one connection; return everything sent back until it closed."""
    server = await http_server.serve(handler, "127.0.0.1", 0, max_body_bytes)
    try:
        return await _exchange(server.sockets[0].getsockname()[1], data)
    finally:
        server.close()


async def _exchange(port: int, data: bytes) -> bytes:
    """Send raw bytes on one connection; return everything the server sent until it closed."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 30)
    writer.close()
    return answer


def _answers(raw: bytes) -> list[tuple[str, dict, dict]]:
    """Split a stream of Content-Length answers into (status line, headers, JSON body)."""
    found = []
    while raw:
        head, _, raw = raw.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers["content-length"])
        found.append((lines[0], headers, json.loads(raw[:length])))
        raw = raw[length:]
    return found


def test_requests_on_one_kept_alive_connection_with_length_chunked_and_continue():
    raw = asyncio.run(
        _served(
            _echo,
            b"POST /a?x=1 HTTP/1.1\r\nHost: h\r\nX-A: one\r\nContent-Length: 5\r\n\r\nhello"
            b"POST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n3;ext=1\r\ncde\r\n0\r\nT: 1\r\n\r\n"
            b"POST /c HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
        )
    )
    assert raw.startswith(b"HTTP/1.1 200 OK\r\n")
    # the third body came with its head: no `100 Continue` is owed (RFC 9110, 10.1.1)
    assert b"100 Continue" not in raw
    answers = _answers(raw)
    assert [(a[2]["target"], a[2]["body"], a[2]["x"]) for a in answers] == [
        ("/a?x=1", "hello", "one"),
        ("/b", "abcde", None),
        ("/c", "ok", None),
    ]
    assert answers[2][1]["connection"] == "close" and "connection" not in answers[0][1]


def test_a_caller_waiting_for_100_continue_gets_it_before_sending_the_body():
    async def run():
        server = await http_server.serve(_echo, "127.0.0.1", 0, 1024)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
        try:
            writer.write(b"POST /c HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n")
            interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
            writer.write(b"ok")
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
            length = int(
                next(
                    v
                    for k, _, v in (h.partition(b":") for h in head.split(b"\r\n"))
                    if k == b"Content-Length"
                )
            )
            return interim, json.loads(await reader.readexactly(length))
        finally:
            writer.close()
            server.close()

    interim, body = asyncio.run(run())
    assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert body["body"] == "ok"


async def _answered(data: bytes) -> list:
    """Send data to an echo server whose bodies may be 16 bytes; return its parsed answers."""
    return _answers(await _served(_echo, data, 16))


def test_bad_requests_get_a_clear_error_and_the_connection_closes():
    cases = [
        (b"NONSENSE\r\n\r\n", "400", "malformed request: Invalid method encountered"),
        (
            b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n",
            "400",
            "malformed request: Invalid character in Content-Length",
        ),
        (b"POST / HTTP/1.1\r\nbroken\r\n\r\n", "400", "malformed request: Invalid header token"),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 17\r\n\r\n",
            "413",
            "the body (17 bytes) is over the gateway's 16 bytes",
        ),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            "400",
            "malformed request: Invalid character in chunk size",
        ),
    ]
    for data, status, message in cases:
        ((line, headers, body),) = asyncio.run(_answered(data))
        assert (line.split(" ")[1], body["message"], headers["connection"]) == (status, message, "close")


def test_http_1_0_closes_unless_kept_alive():
    ((_, headers, _),) = asyncio.run(_answered(b"GET /x HTTP/1.0\r\n\r\nGET /y HTTP/1.0\r\n\r\n"))
    assert headers["connection"] == "close"  # the second request was never read
    answers = asyncio.run(
        _answered(b"GET /x HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /y HTTP/1.0\r\n\r\n")
    )
    assert [a[2]["target"] for a in answers] == ["/x", "/y"]


def test_answers_given_at_once_later_or_by_a_task_go_out_in_the_order_asked():
    def handler(request: http_server.Request):
        document = {"target": request.target, "body": request.body.decode(), "x": None, "method": "POST"}
        if request.target == "/now":
            return http_server.json_response(200, document)
        if request.target == "/later":  # answered from a callback, as the gateway's in-memory path does
            asyncio.get_running_loop().call_later(
                0.05, request.respond, http_server.json_response(200, document)
            )
            return None
        if request.target == "/broken":
            raise RuntimeError("a bug in the handler")
        return _echo(request)

    data = (
        b"POST /later HTTP/1.1\r\nContent-Length: 1\r\n\r\na"
        b"POST /now HTTP/1.1\r\nContent-Length: 1\r\n\r\nb"
        b"POST /broken HTTP/1.1\r\nContent-Length: 0\r\n\r\n"
        b"POST /task HTTP/1.1\r\nContent-Length: 1\r\nConnection: close\r\n\r\nc"
    )
    answers = _answers(asyncio.run(_served(handler, data)))
    assert [(a[0].split(" ")[1], a[2].get("target"), a[2].get("body")) for a in answers] == [
        ("200", "/later", "a"),
        ("200", "/now", "b"),
        ("500", None, None),
        ("200", "/task", "c"),
    ]
    assert answers[2][2]["message"] == "internal error of the gateway"


def test_answers_with_the_same_headers_keep_their_own_length_status_and_connection():
    """Heads of answers whose headers are a tuple are made once, then filled in with each length."""
    headers = (("Content-Type", "application/json"), ("X-V", "m:1 100%\r\nX-Evil: 1"))

    def handle(request: http_server.Request) -> http_server.Response:
        return http_server.Response(int(request.target[1:]), request.body, headers)

    data = (
        b"POST /200 HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"
        b"POST /200 HTTP/1.1\r\nContent-Length: 9\r\n\r\n[1, 2, 3]"
        b"POST /404 HTTP/1.1\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
    )
    answers = _answers(asyncio.run(_served(handle, data)))
    assert [(line, body) for line, _, body in answers] == [
        ("HTTP/1.1 200 OK", {}),
        ("HTTP/1.1 200 OK", [1, 2, 3]),
        ("HTTP/1.1 404 Not Found", {}),
    ]
    assert [(h["content-length"], h["x-v"], h.get("connection")) for _, h, _ in answers] == [
        ("2", "m:1 100%  X-Evil: 1", None),
        ("9", "m:1 100%  X-Evil: 1", None),
        ("2", "m:1 100%  X-Evil: 1", "close"),
    ]
    assert all("x-evil" not in h for _, h, _ in answers)
