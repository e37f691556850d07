"""Batch checksums: a 64-bit word sum (memory speed, read by default) and a CRC (full checks)."""

from __future__ import annotations

import zlib
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

try:  # optional: hardware CRC-32C, ~10x zlib's CRC-32 here
    from crc32c import crc32c as _crc32c_native
except ImportError:  # pragma: no cover - depends on the environment
    _crc32c_native = None

_MASK = (1 << 64) - 1
_SMALL = 4096  # below this many bytes a Python sum beats a compute-kernel call
_SUM = pc.get_function("sum")
_U64 = pa.uint64()


def _words(buf: memoryview) -> int:
    """Return the wrapped sum of the little-endian uint64 words of buf (length a multiple of 8)."""
    if len(buf) < _SMALL:
        return sum(buf.cast("Q")) if buf else 0
    arr = pa.Array.from_buffers(_U64, len(buf) // 8, [None, pa.py_buffer(buf)])
    return _SUM.call([arr]).as_py()  # uint64 sums wrap modulo 2**64


def sum64(data: Any) -> int:
    """Return the sum modulo 2**64 of data's little-endian 64-bit words (last word zero-padded)."""
    if type(data) is pa.Buffer and data.size % 8 == 0 and data.size >= _SMALL:
        # A whole batch as read: sum it in place, no views or wrappers (once per batch read).
        return _SUM.call([pa.Array.from_buffers(_U64, data.size // 8, [None, data])]).as_py()
    view = memoryview(data).cast("B")
    whole = len(view) - len(view) % 8
    total = _words(view[:whole])
    if whole < len(view):
        total += int.from_bytes(view[whole:], "little")
    return total & _MASK


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        for _ in range(8):
            n = (n >> 1) ^ (0x82F63B78 if n & 1 else 0)
        table.append(n)
    return table


_TABLE = _crc32c_table()


def crc32c_python(data: Any, value: int = 0) -> int:
    """Return the CRC-32C of data in pure Python (slow: the fallback without the crc32c module)."""
    crc = value ^ 0xFFFFFFFF
    table = _TABLE
    for byte in memoryview(data).cast("B"):
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


CRC_KINDS = ("crc32", "crc32c")
# New shards use CRC-32C when the crc32c module is importable, else zlib's CRC-32.
WRITE_CRC = "crc32c" if _crc32c_native is not None else "crc32"


def crc(kind: str, data: Any, value: int = 0) -> int:
    """Return the CRC of kind ("crc32" or "crc32c") of data, continuing from value."""
    if kind == "crc32":
        return zlib.crc32(data, value)
    if _crc32c_native is not None:
        return _crc32c_native(data, value)
    return crc32c_python(data, value)


class Digest:
    """Sum64 and CRC (WRITE_CRC) of a byte stream fed in pieces of any length."""

    def __init__(self, crc: bool = True) -> None:
        self._crc_on = crc
        self.kind = WRITE_CRC
        self.crc = 0
        self._total = 0
        self._carry = b""

    def update(self, data: Any) -> None:
        """Add the next piece of the stream."""
        view = memoryview(data).cast("B")
        if self._crc_on:
            self.crc = crc(self.kind, view, self.crc)
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
