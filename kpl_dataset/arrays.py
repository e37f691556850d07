"""Convert between checked Python column values and Arrow arrays without per-value Arrow calls."""

from __future__ import annotations

from array import array
from itertools import accumulate, repeat
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from kpl_dataset.errors import KPLDatasetError

_INT32_MAX = (1 << 31) - 1
_FIXED = {pa.int64(): "q", pa.float64(): "d", pa.int8(): "b"}
_INT8, _BINARY, _STRING, _BOOL = pa.int8(), pa.binary(), pa.string(), pa.bool_()


def _offsets(lengths: Any, n: int, what: str) -> pa.Buffer:
    offsets = array("i")
    try:
        offsets.extend(accumulate(lengths, initial=0))
    except OverflowError:
        raise KPLDatasetError(f"{what}: more than 2 GiB in one record batch; lower batch_bytes") from None
    assert len(offsets) == n + 1
    return pa.py_buffer(offsets)


def _encode_strings(values: list[str]) -> tuple[bytes, Any]:
    joined = "".join(values)
    if joined.isascii():
        return joined.encode("ascii"), map(len, values)
    encoded = []
    for i, v in enumerate(values):
        try:
            encoded.append(v.encode("utf-8"))
        except UnicodeEncodeError as err:
            raise KPLDatasetError(
                f"value {i} of the batch: string is not valid Unicode ({err.reason})"
            ) from None
    return b"".join(encoded), map(len, encoded)


def build(values: list, t: pa.DataType, what: str = "column") -> pa.Array:
    """Return the Arrow array of type t holding the (already checked) Python values."""
    n = len(values)
    if None in values:  # a nullable field's missing values: Arrow's own conversion marks them null
        return pa.array(values, type=t)
    code = _FIXED.get(t)
    if code is not None:
        return pa.Array.from_buffers(t, n, [None, pa.py_buffer(array(code, values))])
    if t == pa.binary():
        data = values[0] if n == 1 else b"".join(values)  # one value (a large one) is not copied
        return pa.Array.from_buffers(t, n, [None, _offsets(map(len, values), n, what), pa.py_buffer(data)])
    if t == pa.string():
        data, lengths = _encode_strings(values)
        return pa.Array.from_buffers(t, n, [None, _offsets(lengths, n, what), pa.py_buffer(data)])
    if t == pa.bool_():
        return pc.cast(pa.Array.from_buffers(pa.uint8(), n, [None, pa.py_buffer(bytes(values))]), t)
    if pa.types.is_struct(t):
        children = [build([v[f.name] for v in values], f.type, f"{what}.{f.name}") for f in t]
        return pa.StructArray.from_arrays(children, fields=list(t))
    if pa.types.is_list(t):
        flat = [x for v in values for x in v]
        offsets = pa.Array.from_buffers(pa.int32(), n + 1, [None, _offsets(map(len, values), n, what)])
        return pa.ListArray.from_arrays(offsets, build(flat, t.value_type, f"{what}[]"), type=t)
    raise KPLDatasetError(f"{what}: no Arrow encoding for type {t}")


def _slices(col: pa.Array) -> tuple[memoryview, list[int]]:
    n = len(col)
    bufs = col.buffers()
    offsets = memoryview(bufs[1]).cast("i")[col.offset : col.offset + n + 1].tolist()
    # Format "B" (unsigned), as for bytes: zero-copy values then compare equal to bytes.
    data = memoryview(bufs[2]).cast("B") if bufs[2] is not None else memoryview(b"")
    return data, offsets


def values(col: pa.Array, zero_copy: bool = False, source: Any = None) -> Any:
    """Return an iterable of the column's Python values, made lazily one row at a time.

    zero_copy: binary values are read-only memoryviews of the column's buffer, not bytes.
    source: an mmap holding the column's buffers; bytes values are sliced from it (one copy each).
    """
    t = col.type
    if not len(col):
        return []
    if col.null_count:
        return col.to_pylist()
    code = _FIXED.get(t)
    if code is not None and t != _INT8:
        return memoryview(col.buffers()[1]).cast(code)[col.offset : col.offset + len(col)].tolist()
    if t in (_BINARY, _STRING):
        data, offsets = _slices(col)
        pieces = map(data.__getitem__, map(slice, offsets, offsets[1:]))
        if t == _BINARY:
            if zero_copy:
                return pieces
            if source is not None:  # no intermediate view per value
                at = col.buffers()[2].address - pa.py_buffer(source).address
                starts = [at + o for o in offsets]
                return map(source.__getitem__, map(slice, starts, starts[1:]))
            return map(memoryview.tobytes, pieces)
        whole = data[: offsets[-1]].tobytes()
        if whole.isascii():  # slicing one decoded str beats decoding every value
            text = whole.decode("ascii")
            return map(text.__getitem__, map(slice, offsets, offsets[1:]))
        return map(str, pieces, repeat("utf-8"))
    return col.to_pylist()


def getter(col: pa.Array, zero_copy: bool = False) -> Any:
    """Return a fast row -> Python value function for one column (binary as memoryview if zero_copy)."""
    t = col.type
    if not len(col) or col.null_count:
        return lambda r: col[r].as_py()
    if t == _BINARY:
        data, offsets = _slices(col)
        if zero_copy:
            return lambda r: data[offsets[r] : offsets[r + 1]]
        return lambda r: data[offsets[r] : offsets[r + 1]].tobytes()
    if t in _FIXED or t in (_STRING, _BOOL):
        # Small immutable values: one conversion per batch makes every later lookup a list index.
        return list(values(col)).__getitem__
    return lambda r: col[r].as_py()  # nested values are mutable: a fresh one per lookup


def _compile(args: str, body: str, names: list[str], extra: dict) -> Any:
    # A generated dict display builds a record about 2x faster than dict(zip(...)); the field
    # names are bound as variables, never written into the source.
    scope = {f"n{k}": name for k, name in enumerate(names)} | extra
    return eval(f"lambda {args}: {{{body}}}", scope)  # noqa: S307 - source made here from indexes only


def row_function(names: list[str], getters: list) -> Any:
    """Return row -> record dict for one batch, from one getter per field."""
    body = ", ".join(f"n{k}: g{k}(r)" for k in range(len(names)))
    return _compile("r", body, names, {f"g{k}": g for k, g in enumerate(getters)})


def record_function(names: list[str]) -> Any:
    """Return (value, value, ...) -> record dict, one argument per field in order."""
    args = ", ".join(f"a{k}" for k in range(len(names)))
    body = ", ".join(f"n{k}: a{k}" for k in range(len(names)))
    return _compile(args, body, names, {})
