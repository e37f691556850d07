"""A reference for benchmarks/serving.py: the least an asyncio reverse proxy in Python does per request.

It reads a request up to its Content-Length, sends it to one replica on a kept-alive
connection, and sends the answer back with a version header: no checks of the request,
no API key, no routing table or canary, no metrics, no timeouts, one replica connection
per caller. It is not part of the product and must never serve anyone: it shows how much
of the gateway process's cost per request is Python, asyncio and the kernel's loopback
(paid by any proxy written this way) and how much is the gateway's own work.

    python benchmarks/floor_proxy.py http://127.0.0.1:PORT   # or unix:PATH; prints the port it listens on
"""

from __future__ import annotations

import asyncio
import sys
from urllib.parse import urlsplit


def take(buffer: bytearray) -> tuple[bytes, bytes] | None:
    """Return the head and body of the first whole message in `buffer` (removed from it), else None."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = bytes(buffer[:end])
    length, at = 0, head.lower().find(b"\r\ncontent-length:")
    if at >= 0:
        line_end = head.find(b"\r\n", at + 2)
        length = int(head[at + 17 : line_end if line_end >= 0 else len(head)])
    if len(buffer) < end + 4 + length:
        return None
    body = bytes(buffer[end + 4 : end + 4 + length])
    del buffer[: end + 4 + length]
    return head, body


class Replica(asyncio.Protocol):
    """The connection to the replica of one caller: answers go back to that caller."""

    def __init__(self, caller: Caller) -> None:
        self.caller = caller
        self.buffer = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if (message := take(self.buffer)) is not None:
            head, body = message
            self.caller.transport.write(
                b"HTTP/1.1 %s OK\r\nContent-Type: application/json\r\nX-KPL-Model-Version: floor\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (head[9:12], len(body), body)
            )


class Caller(asyncio.Protocol):
    """One caller's connection: each request goes to the replica as a POST /predict."""

    def __init__(self, replica: str) -> None:
        self.replica_address = replica  # unix:PATH or http://HOST:PORT
        parts = urlsplit(replica)
        self.host = f"{parts.hostname}:{parts.port}".encode() if parts.hostname else b"localhost"
        self.buffer = bytearray()
        self.replica: Replica | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        asyncio.get_running_loop().create_task(self.connect())

    async def connect(self) -> None:
        loop, address = asyncio.get_running_loop(), self.replica_address
        if address.startswith("unix:"):
            _, self.replica = await loop.create_unix_connection(lambda: Replica(self), address[5:])
        else:
            parts = urlsplit(address)
            _, self.replica = await loop.create_connection(lambda: Replica(self), parts.hostname, parts.port)
        self.data_received(b"")

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.replica is None or (message := take(self.buffer)) is None:
            return
        _, body = message
        self.replica.transport.write(
            b"POST /predict HTTP/1.1\r\nHost: %s\r\nContent-Type: application/octet-stream\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (self.host, len(body), body)
        )


async def main(replica: str) -> None:
    server = await asyncio.get_running_loop().create_server(lambda: Caller(replica), "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
