"""Batch checksums: a 64-bit word sum (memory speed, read by default) and CRC-32 (full checks)."""

from __future__ import annotations

import zlib
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

_MASK = (1 << 64) - 1
_SMALL = 4096  # below this many bytes a Python sum beats a compute-kernel call


def _words(buf: memoryview) -> int:
    """Return the wrapped sum of the little-endian uint64 words of buf (length a multiple of 8)."""
    if len(buf) < _SMALL:
        return sum(buf.cast("Q")) if buf else 0
    arr = pa.Array.from_buffers(pa.uint64(), len(buf) // 8, [None, pa.py_buffer(buf)])
    return pc.sum(arr).as_py()  # uint64 sums wrap modulo 2**64


def sum64(data: Any) -> int:
    """Return the sum modulo 2**64 of data's little-endian 64-bit words (last word zero-padded)."""
    view = memoryview(data).cast("B")
    whole = len(view) - len(view) % 8
    total = _words(view[:whole])
    if whole < len(view):
        total += int.from_bytes(view[whole:], "little")
    return total & _MASK


class Digest:
    """Sum64 and CRC-32 of a byte stream fed in pieces of any length."""

    def __init__(self, crc: bool = True) -> None:
        self._crc_on = crc
        self.crc32 = 0
        self._total = 0
        self._carry = b""

    def update(self, data: Any) -> None:
        """Add the next piece of the stream."""
        view = memoryview(data).cast("B")
        if self._crc_on:
            self.crc32 = zlib.crc32(view, self.crc32)
        if self._carry:
            need = 8 - len(self._carry)
            self._carry += view[:need].tobytes()
            view = view[need:]
            if len(self._carry) < 8:
                return
            self._total += int.from_bytes(self._carry, "little")
            self._carry = b""
        whole = len(view) - len(view) % 8
        if whole:
            self._total += _words(view[:whole])
        self._carry = view[whole:].tobytes()

    @property
    def sum64(self) -> int:
        return (self._total + int.from_bytes(self._carry, "little")) & _MASK
