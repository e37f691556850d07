"""Where the platform reaches a replica's server: `unix:PATH` (a socket only it can open) or `http://HOST:PORT`.

A local replica's server listens on a Unix socket in a folder of its own (0700, the
deployment user's), so no other account on the machine can call it around the gateway;
a server that does not take `KPL_DEPLOY_SOCKET` listens on its TCP port instead. The
folder is hers, so `http.sock` in it may be her link to another account's socket (the
platform, root, would connect through it): a connection is used only when the server's
account (`SO_PEERCRED`) owns the socket's folder (`check_peer`). Standard library only:
the replica supervisor imports it.
"""

from __future__ import annotations

import http.client
import os
import socket
import struct
from urllib.parse import urlsplit

UNIX = "unix:"
MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes with its NUL; longer paths fall back to the port


def unix_url(path: str) -> str:
    """Return the address of a server on a Unix socket."""
    return UNIX + path


def tcp_url(host: str, port: int) -> str:
    """Return the address of a server on a TCP port."""
    return f"http://{host}:{port}"


def split(url: str) -> tuple[str | None, str, int]:
    """Return (socket path, host, port) of an address; the path is None for TCP, host and port "" and 0 for a socket."""
    if url.startswith(UNIX):
        return url[len(UNIX) :], "", 0
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"a replica address is unix:PATH or http://HOST[:PORT], got {url!r}")
    return None, parts.hostname, parts.port or 80


class PeerRefused(OSError):
    """The server on a socket is not the account that owns the socket's folder: not used."""


def check_peer(sock: socket.socket, path: str) -> None:
    """Raise PeerRefused unless the server connected at `path` runs as the owner of the socket's folder."""
    _, uid, _ = struct.unpack(
        "3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    )
    folder = os.path.dirname(path)
    owner = os.lstat(folder).st_uid
    if uid != owner:
        raise PeerRefused(
            f"{path}: answered by uid {uid}, not by uid {owner}, who owns {folder}: a link to another server?"
        )


class _UnixConnection(http.client.HTTPConnection):
    """An HTTP connection over a Unix socket."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)
        check_peer(self.sock, self.path)


def request(
    url: str, method: str, path: str, timeout: float, body: bytes | None = None, headers: dict | None = None
) -> tuple[int, bytes]:
    """Send one request to the server at `url`; return its status and body. Raise OSError, or ValueError for no HTTP."""
    socket_path, host, port = split(url)
    connection = (
        _UnixConnection(socket_path, timeout)
        if socket_path is not None
        else http.client.HTTPConnection(host, port, timeout=timeout)
    )
    try:
        connection.request(method, path, body=body, headers=headers or {})
        answer = connection.getresponse()
        return answer.status, answer.read()
    except http.client.HTTPException as error:
        raise ValueError(f"not an HTTP answer: {error}") from None
    finally:
        connection.close()
