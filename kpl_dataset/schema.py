"""Translate a record_type into an Arrow schema and check records against it."""

from __future__ import annotations

import mmap
import numbers
import os
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from kpl_dataset.errors import (
    DatasetKeyError,
    DatasetTypeError,
    DatasetValueError,
    DefinitionError,
)


class BasicType:
    """Leaf types of a record_type (string values kept from kpl-dataset 0.0.9)."""

    String = "String"
    Int = "Int"
    Float = "Float"
    ByteArray = "ByteArray"
    File = "File"
    Bool = "Bool"


_LEAF_TYPES = {
    BasicType.String: pa.string(),
    BasicType.Int: pa.int64(),
    BasicType.Float: pa.float64(),
    BasicType.ByteArray: pa.binary(),
    BasicType.Bool: pa.bool_(),
    BasicType.File: pa.struct(
        [
            ("type", pa.int8()),
            ("content", pa.binary()),
            ("file_path", pa.string()),
            ("size", pa.int64()),
        ]
    ),
}

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def check_record_type(record_type: Any, path: str = "") -> None:
    """Raise DefinitionError naming the key path when record_type is not a valid definition."""
    where = path or "<root>"
    if not path and not isinstance(record_type, dict):
        raise DefinitionError(
            f"record_type <root>: must be a dict of fields, got {type(record_type).__name__}"
        )
    if isinstance(record_type, dict):
        if not record_type:
            raise DefinitionError(f"record_type {where}: a dict must have at least one key")
        for key, value in record_type.items():
            if not isinstance(key, str):
                raise DefinitionError(f"record_type {where}: key {key!r} must be a string")
            check_record_type(value, _join(path, key))
    elif isinstance(record_type, list):
        if len(record_type) != 1:
            raise DefinitionError(
                f"record_type {where}: a list must hold exactly one element type, got {len(record_type)}"
            )
        check_record_type(record_type[0], f"{path}[]")
    elif not (isinstance(record_type, str) and record_type in _LEAF_TYPES):
        raise DefinitionError(
            f"record_type {where}: {record_type!r} is not a BasicType "
            f"(one of {', '.join(_LEAF_TYPES)}), a dict or a one-element list"
        )


def to_arrow_type(record_type: Any) -> pa.DataType:
    """Return the Arrow type for a (checked) record_type node."""
    if isinstance(record_type, dict):
        return pa.struct([pa.field(k, to_arrow_type(v), nullable=False) for k, v in record_type.items()])
    if isinstance(record_type, list):
        return pa.list_(pa.field("item", to_arrow_type(record_type[0]), nullable=False))
    return _LEAF_TYPES[record_type]


def check_nullable(record_type: dict, nullable: Any) -> list[str]:
    """Return the nullable top-level field names, or raise DefinitionError naming a wrong one."""
    if not isinstance(nullable, (list, tuple)) or not all(isinstance(k, str) for k in nullable):
        raise DefinitionError(f"nullable must be a list of field names, got {nullable!r}")
    unknown = [k for k in nullable if k not in record_type]
    if unknown:
        raise DefinitionError(f"nullable names {unknown} which are not fields of the record_type")
    return [k for k in record_type if k in nullable]


def to_arrow_schema(record_type: dict, nullable: Any = ()) -> pa.Schema:
    """Return the Arrow schema of a record_type after checking it; nullable top-level fields may hold None."""
    check_record_type(record_type)
    allowed = set(check_nullable(record_type, list(nullable)))
    return pa.schema([pa.field(k, to_arrow_type(v), nullable=k in allowed) for k, v in record_type.items()])


class FieldError(Exception):
    """Carry a field path (innermost first), a reason and the error class up to the record's error."""

    def __init__(self, reason: str, parts: list[str] | None = None, kind: type = DatasetTypeError):
        super().__init__(reason)
        self.reason = reason
        self.parts = parts or []
        self.kind = kind

    def path(self) -> str:
        out = ""
        for part in reversed(self.parts):
            out += part if part.startswith("[") or not out else "." + part
        return out


def _show(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def _is_numpy_bool(value: Any) -> bool:
    return type(value).__module__ == "numpy" and getattr(getattr(value, "dtype", None), "kind", "") == "b"


# A leaf or node validator: (value, size accumulator) -> normalised value ready for pa.array.
Validator = Callable[[Any, list], Any]
FileEncoder = Callable[[Any, list], dict]


def _v_string(value: Any, acc: list) -> str:
    if isinstance(value, str):
        acc[0] += len(value)
        return value
    raise FieldError(f"expected String, got {_show(value)}")


def _v_int(value: Any, acc: list) -> int:
    if type(value) is int or (isinstance(value, numbers.Integral) and not isinstance(value, float)):
        value = int(value)
        if _INT64_MIN <= value <= _INT64_MAX:
            acc[0] += 8
            return value
        raise FieldError(f"expected Int, got {value} which does not fit in 64 bits", kind=DatasetValueError)
    if _is_numpy_bool(value):
        acc[0] += 8
        return int(value)
    raise FieldError(f"expected Int, got {_show(value)}")


def _v_float(value: Any, acc: list) -> float:
    if isinstance(value, numbers.Real) and not isinstance(value, str):
        acc[0] += 8
        return float(value)
    raise FieldError(f"expected Float, got {_show(value)}")


def _v_bool(value: Any, acc: list) -> bool:
    if isinstance(value, bool) or _is_numpy_bool(value):
        acc[0] += 1
        return bool(value)
    raise FieldError(f"expected Bool, got {_show(value)}")


def _v_bytes(value: Any, acc: list) -> bytes | mmap.mmap:
    if type(value) is bytes:
        acc[0] += len(value)
        return value
    if isinstance(value, mmap.mmap):
        # a large value an importer spooled to disk: written from the map, never copied in memory
        acc[0] += len(value)
        return value
    if not isinstance(value, str):
        try:
            data = memoryview(value).tobytes()
        except TypeError:
            pass
        else:
            acc[0] += len(data)
            return data
    raise FieldError(f"expected ByteArray (bytes-like), got {_show(value)}")


_LEAF_VALIDATORS: dict[str, Validator] = {
    BasicType.String: _v_string,
    BasicType.Int: _v_int,
    BasicType.Float: _v_float,
    BasicType.Bool: _v_bool,
    BasicType.ByteArray: _v_bytes,
}


def _v_file(encode: FileEncoder) -> Validator:
    def check(value: Any, acc: list) -> dict:
        if not isinstance(value, (str, os.PathLike)):
            raise FieldError(f"expected File (a local path), got {_show(value)}")
        return encode(os.fspath(value), acc)

    return check


def _v_list(item: Validator) -> Validator:
    def check(value: Any, acc: list) -> list:
        if not isinstance(value, (list, tuple)):
            if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
                value = value.tolist()
            if not isinstance(value, list):
                raise FieldError(f"expected a list, got {_show(value)}")
        out = []
        for i, element in enumerate(value):
            try:
                out.append(item(element, acc))
            except FieldError as err:
                err.parts.append(f"[{i}]")
                raise
        return out

    return check


_DEFAULTS = {
    BasicType.String: "",
    BasicType.Int: 0,
    BasicType.Float: 0.0,
    BasicType.ByteArray: b"",
    BasicType.Bool: False,
    BasicType.File: {"type": 0, "content": b"", "file_path": "", "size": 0},
}


def default_value(record_type: Any) -> Any:
    """Return what a missing field holds, as kpl-dataset 0.0.9 read it back (0, "", b"", [], 0.0)."""
    if isinstance(record_type, dict):
        return {k: default_value(v) for k, v in record_type.items()}
    if isinstance(record_type, list):
        return []
    return _DEFAULTS[record_type]


def _check_keys(value: Any, keys: tuple[str, ...]) -> bool:
    """Raise unless value is a dict with no key outside keys; return whether it has every key."""
    if not isinstance(value, dict):
        raise FieldError(f"expected a dict, got {_show(value)}")
    if len(value) == len(keys) and all(k in value for k in keys):
        return True
    extra = [k for k in value if k not in keys]
    if extra:
        raise FieldError(
            f"unexpected key(s) {', '.join(map(repr, extra))}, not in the record_type", kind=DatasetKeyError
        )
    return False


# One field of a dict node: (key, validator, default when the key is missing).
Field = tuple[str, Validator, Any]


def _field_values(value: dict, fields: list[Field], complete: bool, acc: list) -> list:
    # Missing keys take their type's default, as the original wrote them.
    out = []
    for key, validate, default in fields:
        try:
            out.append(validate(value[key], acc) if complete or key in value else default)
        except FieldError as err:
            err.parts.append(key)
            raise
    return out


def _fields(record_type: dict, encode_file: FileEncoder) -> list[Field]:
    return [(k, compile_validator(v, encode_file), default_value(v)) for k, v in record_type.items()]


def _or_none(validate: Validator) -> Validator:
    def check(value: Any, acc: list) -> Any:
        return None if value is None else validate(value, acc)

    return check


def _v_dict(fields: list[Field]) -> Validator:
    keys = tuple(key for key, _, _ in fields)

    def check(value: Any, acc: list) -> dict:
        complete = _check_keys(value, keys)
        out = {}
        for key, validate, default in fields:
            try:
                out[key] = validate(value[key], acc) if complete or key in value else default
            except FieldError as err:
                err.parts.append(key)
                raise
        return out

    return check


def compile_validator(record_type: Any, encode_file: FileEncoder) -> Validator:
    """Build a fast validator for one (checked) record_type node."""
    if isinstance(record_type, dict):
        return _v_dict(_fields(record_type, encode_file))
    if isinstance(record_type, list):
        return _v_list(compile_validator(record_type[0], encode_file))
    if record_type == BasicType.File:
        return _v_file(encode_file)
    return _LEAF_VALIDATORS[record_type]


class RecordChecker:
    """Check whole records against a record_type and split them into column values."""

    def __init__(self, record_type: dict, encode_file: FileEncoder, nullable: Any = ()):
        check_record_type(record_type)
        allowed = set(check_nullable(record_type, list(nullable)))
        self.keys = tuple(record_type)
        # A nullable field takes None, and holds None when the record leaves it out.
        self._fields = [
            (k, _or_none(v), None) if k in allowed else (k, v, d)
            for k, v, d in _fields(record_type, encode_file)
        ]

    def check(self, record: Any, index: int) -> tuple[list, int]:
        """Return (one value per top-level field, approximate bytes) or raise naming the record."""
        acc = [0]
        try:
            values = _field_values(record, self._fields, _check_keys(record, self.keys), acc)
        except FieldError as err:
            where = f", field {err.path()}" if err.parts else ""
            raise err.kind(f"record {index}{where}: {err.reason}") from None
        return values, acc[0]
