"""The helper's wire format: one JSON object per line, file descriptors alongside (SCM_RIGHTS)."""

from __future__ import annotations

import array
import json
import socket

MAX_LINE = 1 << 20  # a request is small: argv, environment, a few paths
MAX_FDS = 3  # stdin, stdout, stderr of a process to start


class ProtocolError(Exception):
    """The other side sent something that is not one JSON line, or went away mid-line."""


def send(sock: socket.socket, message: dict, fds: list[int] = ()) -> None:
    """Send one message, with `fds` passed along with its first bytes."""
    data = json.dumps(message).encode() + b"\n"
    sent = socket.send_fds(sock, [data], list(fds)) if fds else 0
    sock.sendall(data[sent:])


class Reader:
    """Read messages from a stream socket, keeping what arrived beyond the current line."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.pending = b""
        self.fds: list[int] = []

    def read(self) -> dict | None:
        """Return the next message (None at the end of the stream); its descriptors go to `self.fds`."""
        while b"\n" not in self.pending:
            space = socket.CMSG_LEN(MAX_FDS * array.array("i").itemsize)
            chunk, ancillary, _, _ = self.sock.recvmsg(65536, space, socket.MSG_CMSG_CLOEXEC)
            for level, kind, data in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds = array.array("i")
                    fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
                    self.fds.extend(fds)
            if not chunk:
                if self.pending:
                    raise ProtocolError("the connection closed in the middle of a message")
                return None
            self.pending += chunk
            if len(self.pending) > MAX_LINE:
                raise ProtocolError(f"a message longer than {MAX_LINE} bytes")
        line, _, self.pending = self.pending.partition(b"\n")
        try:
            message = json.loads(line)
        except ValueError as error:
            raise ProtocolError(f"not JSON: {error}") from None
        if not isinstance(message, dict):
            raise ProtocolError("a message is a JSON object")
        return message

    def take_fds(self) -> list[int]:
        """Return the descriptors received so far (the caller closes them)."""
        fds, self.fds = self.fds, []
        return fds
