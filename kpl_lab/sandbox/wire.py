"""Frames between the platform and a sandboxed worker: a JSON header and a byte payload.

The platform sends calls whose arguments are pickled (it trusts itself); a worker answers in
JSON and raw bytes only, which the platform reads within `MAX_HEADER` and `MAX_PAYLOAD`: a
worker is never trusted with anything that could run code in the platform.
"""

from __future__ import annotations

import json
import os
import struct

HEAD = struct.Struct("!II")  # header length, payload length
MAX_HEADER = 64 << 20
MAX_PAYLOAD = 256 << 20


class WireError(Exception):
    """The other side broke the framing, sent too much, or went away."""


def write_frame(fd: int, header: dict, payload: bytes = b"") -> None:
    """Write one frame to `fd` (blocking)."""
    data = json.dumps(header).encode()
    view = memoryview(HEAD.pack(len(data), len(payload)) + data + payload)
    while view:
        view = view[os.write(fd, view) :]


def read_exact(fd: int, size: int) -> bytes:
    """Read exactly `size` bytes from `fd` (blocking); WireError at the end of the stream."""
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise WireError("the other side closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int) -> tuple[dict, bytes]:
    """Read one frame from `fd` (blocking), refusing one larger than the limits."""
    header_size, payload_size = HEAD.unpack(read_exact(fd, HEAD.size))
    if header_size > MAX_HEADER or payload_size > MAX_PAYLOAD:
        raise WireError(f"a frame of {header_size + payload_size} bytes is over the limit")
    try:
        header = json.loads(read_exact(fd, header_size))
    except ValueError as error:
        raise WireError(f"not JSON: {error}") from None
    if not isinstance(header, dict):
        raise WireError("a frame's header is a JSON object")
    return header, read_exact(fd, payload_size)
