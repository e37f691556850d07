"""The gateway's HTTP client against real sockets: kept-alive reuse, stale connections, answer framings."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest

from kpl_lab.serving import address
from kpl_lab.serving.upstream import NoAnswer, StaleConnection, Upstream

Answer = bytes | None  # raw bytes written back; None: close without answering


async def _serve(answers: list[Answer], seen: list[bytes], connections: list[int], unix: str = ""):
    """Start a server answering each request with the next of `answers` (on the Unix socket `unix`); return it and its URL."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            await answer_each(reader, writer)
        finally:  # also when the test's loop ends first
            writer.close()

    async def answer_each(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )
            seen.append(head + await reader.readexactly(length))
            answer = answers.pop(0)
            if answer is None:
                return
            writer.write(answer)
            await writer.drain()
            if b"close" in answer or b"Content-Length" not in answer and b"chunked" not in answer:
                return

    if unix:
        return await asyncio.start_unix_server(handle, unix), f"unix:{unix}"
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


def _ok(body: bytes, extra: bytes = b"") -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        + extra
        + (b"Content-Length: %d\r\n\r\n" % len(body))
        + body
    )


def test_answers_in_every_framing_over_one_kept_alive_connection():
    answers = [
        _ok(b'{"a": 1}'),
        b'HTTP/1.1 400 Bad Request\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{"b"\r\n3;x=1\r\n: 2\r\n1\r\n}\r\n0\r\nT: 1\r\n\r\n',
        _ok(b"{}"),
        b'HTTP/1.0 200 OK\r\n\r\n{"till": "close"}',
    ]
    seen, connections = [], []

    async def scenario():
        server, url = await _serve(answers, seen, connections)
        upstream = Upstream(5.0, 30.0)
        found = [await upstream.post(url, "/predict", b"img-%d" % i, "image/png") for i in range(4)]
        upstream.close()
        server.close()
        return found

    found = asyncio.run(scenario())
    assert [(a.status, a.body) for a in found] == [
        (200, b'{"a": 1}'),
        (400, b'{"b": 2}'),
        (200, b"{}"),
        (200, b'{"till": "close"}'),
    ]
    assert len(connections) == 1  # one connection carried all four
    assert seen[0] == (
        b"POST /predict HTTP/1.1\r\nHost: 127.0.0.1:%s\r\nContent-Type: image/png\r\nContent-Length: 5\r\n\r\nimg-0"
        % seen[0].split(b"Host: 127.0.0.1:")[1].split(b"\r\n")[0]
    )


def test_a_replica_on_a_unix_socket_is_reached_over_one_kept_alive_connection(tmp_path):
    seen, connections = [], []
    answers = [_ok(b"1"), _ok(b"2")]

    async def scenario():
        server, url = await _serve(answers, seen, connections, unix=str(tmp_path / "http.sock"))
        upstream = Upstream(5.0, 30.0)
        first = await upstream.post(url, "/predict", b"a", "x")
        second: asyncio.Future = asyncio.get_running_loop().create_future()
        assert upstream.post_now(url, "/predict", b"b", "x", second.set_result)
        found = [first, await second]
        upstream.close()
        server.close()
        return found

    assert [a.body for a in asyncio.run(scenario())] == [b"1", b"2"]
    assert len(connections) == 1
    assert seen == [
        b"POST /predict HTTP/1.1\r\nHost: localhost\r\nContent-Type: x\r\nContent-Length: 1\r\n\r\na",
        b"POST /predict HTTP/1.1\r\nHost: localhost\r\nContent-Type: x\r\nContent-Length: 1\r\n\r\nb",
    ]


def test_a_link_to_another_accounts_socket_is_not_used(tmp_path):
    """A replica's socket folder is its user's: her link there to another server's socket leads nowhere."""
    if os.geteuid() != 0:
        pytest.skip("needs root to give the socket's folder away")
    theirs, hers = tmp_path / "theirs", tmp_path / "hers"
    theirs.mkdir()
    hers.mkdir()
    os.chown(hers, 65534, 65534)  # the deployment's user; the server below runs as root
    (hers / "http.sock").symlink_to(theirs / "http.sock")
    seen, connections = [], []

    async def scenario():
        server, _ = await _serve([_ok(b"theirs")], seen, connections, unix=str(theirs / "http.sock"))
        upstream = Upstream(5.0, 30.0)
        try:
            with pytest.raises(NoAnswer, match="answered by uid 0, not by uid 65534") as refused:
                await upstream.post(f"unix:{hers / 'http.sock'}", "/predict", b"a", "x")
            assert not refused.value.sent
            with pytest.raises(OSError, match="answered by uid 0"):  # health checks and metrics too
                address.request(f"unix:{hers / 'http.sock'}", "GET", "/health", 5.0)
            while len(connections) < 2:  # the server saw both connect and close: nothing left open
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)
        finally:
            upstream.close()
            server.close()

    asyncio.run(scenario())
    assert seen == []  # no request reached the other server


def test_a_connection_closed_while_idle_is_replaced_and_the_request_sent_again():
    seen, connections = [], []
    answers = [_ok(b"1", b"X-Then: close\r\n"), _ok(b"2")]  # closed after answering, unannounced

    async def scenario():
        server, url = await _serve(answers, seen, connections)
        upstream = Upstream(5.0, 30.0)
        first = await upstream.post(url, "/predict", b"a", "x")
        await asyncio.sleep(0.1)  # the server closes its end meanwhile
        second = await upstream.post(url, "/predict", b"b", "x")
        upstream.close()
        server.close()
        return first, second

    answers_seen = asyncio.run(scenario())
    assert [a.body for a in answers_seen] == [b"1", b"2"]
    assert len(connections) == 2


def test_a_replica_dying_on_a_request_or_not_listening_gives_no_answer():
    seen, connections = [], []

    async def scenario():
        server, url = await _serve([None], seen, connections)
        upstream = Upstream(5.0, 30.0)
        with pytest.raises(NoAnswer) as died:
            await upstream.post(url, "/predict", b"crash", "x")
        server.close()
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            free = probe.getsockname()[1]
        with pytest.raises(NoAnswer) as refused:
            await upstream.post(f"http://127.0.0.1:{free}", "/predict", b"a", "x")
        return died.value, refused.value

    died, refused = asyncio.run(scenario())
    assert died.sent and "closed the connection" in str(died)
    assert not refused.sent and "could not connect" in str(refused)


def test_a_content_type_cannot_add_headers():
    seen, connections = [], []

    async def scenario():
        server, url = await _serve([_ok(b"{}")], seen, connections)
        upstream = Upstream(5.0, 30.0)
        await upstream.post(url, "/predict", b"a", "text/plain\r\nX-Evil: 1")
        upstream.close()
        server.close()

    asyncio.run(scenario())
    assert b"\r\nX-Evil" not in seen[0] and b"Content-Type: text/plain  X-Evil: 1\r\n" in seen[0]


def test_a_request_sent_at_once_on_an_idle_connection_is_answered_by_callback():
    seen, connections = [], []
    answers = [_ok(b"1"), _ok(b"2"), None]  # the third request: read, then the connection closes

    async def scenario():
        server, url = await _serve(answers, seen, connections)
        upstream = Upstream(5.0, 30.0)
        loop = asyncio.get_running_loop()
        nothing_idle = upstream.post_now(url, "/predict", b"a", "x", lambda outcome: None)
        await upstream.post(url, "/predict", b"a", "x")  # opens the connection and keeps it
        outcomes = []
        for body in (b"b", b"c"):
            answered = loop.create_future()
            assert upstream.post_now(url, "/predict", body, "x", answered.set_result)
            outcomes.append(await answered)
        upstream.close()
        server.close()
        return nothing_idle, outcomes

    nothing_idle, (second, third) = asyncio.run(scenario())
    assert nothing_idle is False
    assert (second.status, second.body) == (200, b"2")
    assert isinstance(
        third, StaleConnection
    )  # indistinguishable from closed while idle: `post` sends it again
    assert len(connections) == 1 and seen[-1].endswith(b"\r\n\r\nc")


def test_a_replica_that_never_answers_fails_the_request_after_the_timeout():
    """`post` times out on its own; the late request fails, the next one is answered."""
    seen, connections = [], []

    async def scenario():
        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await reader.read(65536)  # the request, never answered
                await asyncio.sleep(30)
            finally:  # cancelled when the test's loop ends
                writer.close()

        quiet = await asyncio.start_server(silent, "127.0.0.1", 0)
        quiet_url = f"http://127.0.0.1:{quiet.sockets[0].getsockname()[1]}"
        server, url = await _serve([_ok(b"1"), _ok(b"2")], seen, connections)
        upstream = Upstream(5.0, 0.2)
        await upstream.post(url, "/predict", b"warm", "x")  # an idle connection for post_now
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(NoAnswer, match="no answer within 0.2 s") as late:
            await upstream.post(quiet_url, "/predict", b"a", "x")
        waited = loop.time() - started
        outcomes: list = []
        assert upstream.post_now(url, "/predict", b"b", "x", outcomes.append)
        while not outcomes:
            await asyncio.sleep(0.01)
        upstream.close()
        quiet.close()
        server.close()
        return late.value, waited, outcomes[0]

    error, waited, answer = asyncio.run(scenario())
    assert error.sent and 0.2 <= waited < 3.0
    assert (answer.status, answer.body) == (200, b"2")


def test_a_request_sent_at_once_and_never_answered_fails_at_the_first_sweep_past_its_deadline():
    """`post_now` sets no timer: its owner's `sweep` ends what is late, and only that."""

    async def scenario():
        async def once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await reader.readuntil(b"warm")
                writer.write(_ok(b"1"))
                await reader.read(65536)  # the next request, never answered
                await asyncio.sleep(30)
            finally:  # cancelled when the test's loop ends
                writer.close()

        server = await asyncio.start_server(once, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        upstream = Upstream(5.0, 0.3)
        await upstream.post(url, "/predict", b"warm", "x")
        outcomes: list = []
        assert upstream.post_now(url, "/predict", b"a", "x", outcomes.append)
        upstream.sweep()  # before the deadline: nothing ends
        await asyncio.sleep(0.05)
        early = list(outcomes)
        await asyncio.sleep(0.4)
        upstream.sweep()
        await asyncio.sleep(0)
        upstream.close()
        server.close()
        return early, outcomes

    early, outcomes = asyncio.run(scenario())
    assert early == []
    (late,) = outcomes
    assert isinstance(late, NoAnswer) and late.sent and str(late) == "no answer within 0.3 s"
