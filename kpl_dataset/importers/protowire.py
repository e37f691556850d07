"""Decode protobuf wire format and text format without the protobuf package."""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator

_DOUBLE = struct.Struct("<d")
_FLOAT = struct.Struct("<f")


class WireError(ValueError):
    """Bytes or text that are not a valid protobuf message."""


Field = tuple[int, int, "int | bytes"]


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Return the varint at POS and the position after it."""
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise WireError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise WireError("varint longer than 10 bytes")


def signed64(value: int) -> int:
    """Reinterpret an unsigned varint as a two's complement int64."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


def fields(buf: bytes) -> Iterator[Field]:
    """Yield (number, wire type, value) for every field of one message."""
    pos = 0
    end = len(buf)
    while pos < end:
        key, pos = read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise WireError(f"field number 0 at byte {pos}")
        if wire == 0:
            value, pos = read_varint(buf, pos)
        elif wire == 1:
            if pos + 8 > end:
                raise WireError("truncated 64-bit field")
            value = int.from_bytes(buf[pos : pos + 8], "little")
            pos += 8
        elif wire == 2:
            size, pos = read_varint(buf, pos)
            if pos + size > end:
                raise WireError(f"length-delimited field {number} runs past the end")
            value = bytes(buf[pos : pos + size])
            pos += size
        elif wire == 5:
            if pos + 4 > end:
                raise WireError("truncated 32-bit field")
            value = int.from_bytes(buf[pos : pos + 4], "little")
            pos += 4
        else:
            raise WireError(f"unsupported wire type {wire} for field {number}")
        yield number, wire, value


def as_double(wire: int, value: int | bytes) -> float:
    """Decode a double (or float) field value."""
    if wire == 1:
        return _DOUBLE.unpack(int(value).to_bytes(8, "little"))[0]  # type: ignore[arg-type]
    if wire == 5:
        return _FLOAT.unpack(int(value).to_bytes(4, "little"))[0]  # type: ignore[arg-type]
    raise WireError(f"expected a 64-bit double, got wire type {wire}")


def as_bytes(wire: int, value: int | bytes) -> bytes:
    """Check a length-delimited value and return it."""
    if wire != 2 or not isinstance(value, bytes):
        raise WireError(f"expected a length-delimited field, got wire type {wire}")
    return value


def as_int(wire: int, value: int | bytes) -> int:
    """Check a varint value and return it as int64."""
    if wire != 0 or not isinstance(value, int):
        raise WireError(f"expected a varint, got wire type {wire}")
    return signed64(value)


def repeated_ints(wire: int, value: int | bytes) -> list[int]:
    """Decode a repeated int64 field that may be packed or not."""
    if wire == 0:
        return [signed64(int(value))]
    data = as_bytes(wire, value)
    out = []
    pos = 0
    while pos < len(data):
        item, pos = read_varint(data, pos)
        out.append(signed64(item))
    return out


# Text format (MessageToString output): tokens and a generic tree.

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<comment>\#[^\n]*)
      | (?P<punct>[{}<>:\[\],;])
      | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
      | (?P<word>[A-Za-z0-9_.+-]+)
    )""",
    re.VERBOSE,
)
_ESCAPE = re.compile(rb"\\(?:([0-7]{1,3})|x([0-9A-Fa-f]{1,2})|(.))", re.DOTALL)
_SIMPLE_ESCAPES = {
    b"n": b"\n",
    b"t": b"\t",
    b"r": b"\r",
    b"a": b"\a",
    b"b": b"\b",
    b"f": b"\f",
    b"v": b"\v",
    b"\\": b"\\",
    b"'": b"'",
    b'"': b'"',
    b"?": b"?",
}

TextNode = list[tuple[str, "bytes | str | TextNode"]]


def unescape(literal: str) -> bytes:
    """Turn a quoted text-format string (C escapes, octal UTF-8 bytes) into bytes."""

    def one(match: re.Match[bytes]) -> bytes:
        octal, hexa, char = match.groups()
        if octal is not None:
            return bytes([int(octal, 8) & 0xFF])
        if hexa is not None:
            return bytes([int(hexa, 16)])
        if char in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[char]
        raise WireError(f"unknown escape \\{char.decode('latin-1')}")

    return _ESCAPE.sub(one, literal[1:-1].encode("utf-8"))


def _tokens(text: str) -> Iterator[tuple[str, str, int]]:
    pos = 0
    line = 1
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            if text[pos:].strip() == "":
                return
            raise WireError(f"line {line}: unexpected character {text[pos]!r}")
        line += text.count("\n", pos, match.start(match.lastgroup))
        pos = match.end()
        kind = match.lastgroup
        if kind != "comment":
            yield kind, match.group(kind), line  # type: ignore[misc]


def parse_text(text: str) -> TextNode:
    """Parse protobuf text format into [(field, value)] where nested messages are lists."""
    tokens = list(_tokens(text))
    pos = 0

    def parse_message(closer: str | None) -> TextNode:
        nonlocal pos
        node: TextNode = []
        while True:
            if pos >= len(tokens):
                if closer is None:
                    return node
                raise WireError(f"missing {closer!r} at end of text")
            kind, value, line = tokens[pos]
            if kind == "punct" and value == closer:
                pos += 1
                return node
            if kind != "word":
                raise WireError(f"line {line}: expected a field name, got {value!r}")
            pos += 1
            if pos < len(tokens) and tokens[pos][1] == ":":
                pos += 1
            if pos >= len(tokens):
                raise WireError(f"line {line}: field {value!r} has no value")
            vkind, vvalue, vline = tokens[pos]
            pos += 1
            if vkind == "punct" and vvalue in "{<":
                node.append((value, parse_message("}" if vvalue == "{" else ">")))
            elif vkind == "string":
                literal = unescape(vvalue)
                # Adjacent string literals concatenate, as in C.
                while pos < len(tokens) and tokens[pos][0] == "string":
                    literal += unescape(tokens[pos][1])
                    pos += 1
                node.append((value, literal))
            elif vkind == "word":
                node.append((value, vvalue))
            else:
                raise WireError(f"line {vline}: unexpected {vvalue!r} after field {value!r}")
            if pos < len(tokens) and tokens[pos][1] in (",", ";"):
                pos += 1

    return parse_message(None)
