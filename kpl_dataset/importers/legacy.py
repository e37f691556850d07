"""Read datasets written by the original kpl-dataset 0.0.9 (protobuf) and migrate them."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kpl_dataset import BasicType
from kpl_dataset._progress import Progress
from kpl_dataset.files import FileAs, FileType
from kpl_dataset.importers.output import DatasetOutput
from kpl_dataset.importers.protowire import (
    WireError,
    as_bytes,
    as_double,
    as_int,
    fields,
    parse_text,
    repeated_ints,
)
from kpl_dataset.importers.safety import ImportFailed, UnsafeEntry, safe_name

_BASIC_TYPES = {
    "string": BasicType.String,
    "int64": BasicType.Int,
    "bytes": BasicType.ByteArray,
    "float64": BasicType.Float,
    "file": BasicType.File,
}
_BASIC_NUMBERS = {6: "string", 3: "int64", 1: "bytes", 2: "float64", 4: "list", 5: "map", 7: "file"}

# Feature field numbers (define.proto).
_F_STRING, _F_BYTES, _F_DOUBLE, _F_INT, _F_LIST, _F_MAP, _F_FILE = 2, 3, 4, 5, 7, 8, 9
# DynamicType flags.
_D_STRING, _D_BYTES, _D_DOUBLE, _D_INT, _D_LIST, _D_MAP = 0, 1, 2, 3, 4, 5


def decode_text(raw: bytes) -> str:
    """Decode a String value as the original did: UTF-8, else GBK."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("gbk", errors="replace")


def _record_type(node: list, where: str) -> Any:
    """Turn a text-format RecordType node into a record_type value."""
    basic = "unKnow"
    properties: dict[str, Any] = {}
    keys: list[str] = []
    item = None
    for name, value in node:
        if name == "basicType":
            basic = _BASIC_NUMBERS.get(int(value), value) if str(value).isdigit() else value
        elif name == "properties":
            entry = dict(value)
            key = decode_text(entry.get("key", b""))
            properties[key] = _record_type(entry.get("value", []), f"{where}.{key}")
        elif name == "keys":
            keys.append(decode_text(value))
        elif name == "item":
            item = _record_type(value, f"{where}[0]")
    if basic in _BASIC_TYPES:
        return _BASIC_TYPES[basic]
    if basic == "list":
        if item is None:
            raise ImportFailed(f"{where}: list type without an item type")
        return [item]
    if basic == "map":
        ordered = [k for k in keys if k in properties] + [k for k in properties if k not in keys]
        return {k: properties[k] for k in ordered}
    raise ImportFailed(f"{where}: unknown basicType {basic!r}")


def read_meta(path: Path) -> tuple[str, int, Any]:
    """Return (id, version, record_type) from a text-format .meta file."""
    try:
        tree = parse_text(path.read_text(encoding="utf-8", errors="surrogateescape"))
    except WireError as exc:
        raise ImportFailed(f"{path}: {exc}") from None
    meta = dict(tree)
    if "record_type" not in meta:
        raise ImportFailed(f"{path}: no record_type")
    record_type = _record_type(meta["record_type"], "record_type")
    if not isinstance(record_type, dict):
        raise ImportFailed(f"{path}: record_type is not a map")
    return decode_text(meta.get("id", b"")), int(meta.get("version", 0)), record_type


def read_index(path: Path) -> list[int]:
    """Return the record offsets stored in a .index file."""
    offsets: list[int] = []
    for number, wire, value in fields(path.read_bytes()):
        if number == 1:
            offsets.extend(repeated_ints(wire, value))
    return offsets


def _map_entries(buf: bytes) -> Iterator[tuple[str, bytes]]:
    """Yield (key, value bytes) of a map<string, message> field's entries."""
    for number, wire, value in fields(buf):
        if number != 1:
            continue
        key = b""
        body = b""
        for n, w, v in fields(as_bytes(wire, value)):
            if n == 1:
                key = as_bytes(w, v)
            elif n == 2:
                body = as_bytes(w, v)
        yield decode_text(key), body


def _feature(buf: bytes) -> dict[int, tuple[int, int | bytes]]:
    return {number: (wire, value) for number, wire, value in fields(buf)}


def _basic(feature: bytes, kind: str) -> Any:
    got = _feature(feature)
    if kind == BasicType.Int:
        return as_int(*got[_F_INT]) if _F_INT in got else 0
    if kind == BasicType.Float:
        return as_double(*got[_F_DOUBLE]) if _F_DOUBLE in got else 0.0
    if kind == BasicType.ByteArray:
        return as_bytes(*got[_F_BYTES]) if _F_BYTES in got else b""
    if kind == BasicType.String:
        number = _F_BYTES if _F_BYTES in got else _F_STRING
        return decode_text(as_bytes(*got[number])) if number in got else ""
    if kind == BasicType.File:
        out: dict[str, Any] = {"type": 0, "content": b"", "file_path": "", "size": 0}
        if _F_FILE in got:
            for n, w, v in fields(as_bytes(*got[_F_FILE])):
                if n == 1:
                    out["type"] = as_int(w, v)
                elif n == 2:
                    out["content"] = as_bytes(w, v)
                elif n == 3:
                    out["file_path"] = decode_text(as_bytes(w, v))
                elif n == 4:
                    out["size"] = as_int(w, v)
        return out
    raise ImportFailed(f"unsupported type {kind!r}")


def _decode(feature: bytes, kind: Any, where: str) -> Any:
    try:
        if isinstance(kind, dict):
            got = _feature(feature)
            return decode_map(as_bytes(*got[_F_MAP]) if _F_MAP in got else b"", kind, where)
        if isinstance(kind, list):
            got = _feature(feature)
            return decode_list(as_bytes(*got[_F_LIST]) if _F_LIST in got else b"", kind[0], where)
        return _basic(feature, kind)
    except WireError as exc:
        raise ImportFailed(f"{where}: {exc}") from None


def decode_map(buf: bytes, record_type: dict, where: str = "") -> dict:
    """Decode a FeatureMap by its record_type, defaults for absent keys as the original."""
    present = dict(_map_entries(buf))
    return {
        key: _decode(present.get(key, b""), kind, f"{where}.{key}" if where else key)
        for key, kind in record_type.items()
    }


def decode_list(buf: bytes, item: Any, where: str) -> list:
    """Decode a FeatureList whose items are all of type ITEM."""
    values = []
    for number, wire, value in fields(buf):
        if number == 1:
            values.append(_decode(as_bytes(wire, value), item, f"{where}[{len(values)}]"))
    return values


def decode_dynamic(buf: bytes) -> Any:
    """Decode one DynamicType value of a .prop meta db."""
    flag = _D_STRING
    scalars: dict[int, Any] = {}
    items: list[Any] = []
    mapping: dict[str, Any] = {}
    for number, wire, value in fields(buf):
        if number == 1:
            flag = as_int(wire, value)
        elif number == 6:
            items.append(decode_dynamic(as_bytes(wire, value)))
        elif number == 7:
            entry = dict((n, (w, v)) for n, w, v in fields(as_bytes(wire, value)))
            key = decode_text(as_bytes(*entry[1])) if 1 in entry else ""
            mapping[key] = decode_dynamic(as_bytes(*entry[2]) if 2 in entry else b"")
        else:
            scalars[number] = (wire, value)
    if flag == _D_STRING:
        return decode_text(as_bytes(*scalars[2])) if 2 in scalars else ""
    if flag == _D_DOUBLE:
        return as_double(*scalars[4]) if 4 in scalars else 0.0
    if flag == _D_INT:
        return as_int(*scalars[5]) if 5 in scalars else 0
    if flag == _D_LIST:
        return items
    if flag == _D_MAP:
        return mapping
    return None


def read_prop(path: Path) -> dict[str, Any]:
    """Return the key/value meta db stored in a .prop file."""
    try:
        return {key: decode_dynamic(body) for key, body in _map_entries(path.read_bytes())}
    except WireError as exc:
        raise ImportFailed(f"{path}: {exc}") from None


class LegacyPart:
    """One part (`<name>.meta/.index/.data/.prop`) of an original 0.0.9 dataset."""

    def __init__(self, data_dir: Path, name: str) -> None:
        self.data_dir = data_dir
        self.name = name
        self.meta_path = data_dir / f"{name}.meta"
        self.index_path = data_dir / f"{name}.index"
        self.data_path = data_dir / f"{name}.data"
        self.prop_path = data_dir / f"{name}.prop"
        for path in (self.index_path, self.data_path):
            if not path.is_file():
                raise ImportFailed(f"{path}: missing (part {name!r} is incomplete)")
        _, _, self.record_type = read_meta(self.meta_path)
        try:
            self.offsets = read_index(self.index_path)
        except WireError as exc:
            raise ImportFailed(f"{self.index_path}: {exc}") from None
        if not self.offsets:
            raise ImportFailed(
                f"{self.index_path}: empty index: part {name!r} was never closed by its writer"
            )
        data_size = self.data_path.stat().st_size
        if self.offsets[0] != 0:
            raise ImportFailed(f"{self.index_path}: first offset is {self.offsets[0]}, not 0")
        for i in range(len(self.offsets) - 1):
            if self.offsets[i + 1] < self.offsets[i]:
                raise ImportFailed(f"{self.index_path}: record {i}: offsets go backwards")
        if self.offsets[-1] != data_size:
            raise ImportFailed(
                f"{self.data_path}: {data_size} bytes but the index ends at {self.offsets[-1]} "
                "(truncated or damaged)"
            )

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __iter__(self) -> Iterator[dict]:
        with open(self.data_path, "rb") as fp:
            for i in range(len(self)):
                size = self.offsets[i + 1] - self.offsets[i]
                buf = fp.read(size)
                try:
                    yield decode_map(buf, self.record_type)
                except (WireError, ImportFailed) as exc:
                    raise ImportFailed(f"{self.data_path}: record {i}: {exc}") from None

    def properties(self) -> dict[str, Any]:
        """Return the part's meta db (empty when it has none)."""
        return read_prop(self.prop_path) if self.prop_path.is_file() else {}

    def large_file(self, rel_path: str) -> Path:
        """Return the on-disk file a large File value refers to, checked to stay inside."""
        clean = safe_name(rel_path)
        path = self.data_dir / clean
        st = os.lstat(path) if os.path.lexists(path) else None
        if st is None:
            raise ImportFailed(f"{path}: referenced large file is missing")
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeEntry(f"{rel_path!r}: referenced large file is not a regular file")
        return path


def legacy_parts(data_dir: Path) -> list[str]:
    """Return the part names of an original dataset folder, sorted."""
    return sorted(p.name[: -len(".meta")] for p in data_dir.glob("*.meta") if p.is_file())


class FileValues:
    """Turn decoded File dicts back into local paths the writer can take."""

    def __init__(self, part: LegacyPart, scratch: Path) -> None:
        self.part = part
        self.scratch = scratch
        self._made: list[str] = []

    def convert(self, value: Any, kind: Any) -> Any:
        """Replace every File value inside VALUE (of type KIND) with a path."""
        if isinstance(kind, dict):
            return {k: self.convert(value[k], t) for k, t in kind.items()}
        if isinstance(kind, list):
            return [self.convert(v, kind[0]) for v in value]
        if kind != BasicType.File:
            return value
        # Each value keeps its form (Small inline, Large beside the shards) whatever the threshold.
        if value["type"] == FileType.Large:
            return FileAs(str(self.part.large_file(value["file_path"])), FileType.Large)
        fd, name = tempfile.mkstemp(dir=self.scratch)
        with os.fdopen(fd, "wb") as fp:
            fp.write(value["content"])
        self._made.append(name)
        return FileAs(name, FileType.Small)

    def release(self) -> None:
        """Remove the scratch files made for the last record (the writer has read them)."""
        for name in self._made:
            os.unlink(name)
        self._made.clear()


def has_file(kind: Any) -> bool:
    """Tell whether a record_type contains a File anywhere."""
    if isinstance(kind, dict):
        return any(has_file(v) for v in kind.values())
    if isinstance(kind, list):
        return has_file(kind[0])
    return kind == BasicType.File


def migrate_legacy(
    src: str | os.PathLike[str], dest: str | os.PathLike[str], quiet: bool = True
) -> dict[str, int]:
    """Copy every part of an original 0.0.9 dataset at SRC, with its meta db, into DEST."""
    data_dir = Path(src)
    if not data_dir.is_dir():
        raise ImportFailed(f"{data_dir}: not a folder holding a kpl-dataset 0.0.9 dataset")
    names = legacy_parts(data_dir)
    if not names:
        raise ImportFailed(f"{data_dir}: no <part>.meta files: not a kpl-dataset 0.0.9 dataset")
    parts = [LegacyPart(data_dir, name) for name in names]
    total = sum(len(p) for p in parts)
    with (
        tempfile.TemporaryDirectory(prefix="kpl-legacy-") as scratch,
        DatasetOutput(dest) as out,
        Progress("legacy", total, quiet=quiet) as progress,
    ):
        for part in parts:
            out.part(part.name, part.record_type, part.properties())
            files = FileValues(part, Path(scratch)) if has_file(part.record_type) else None
            for record in part:
                if files is not None:
                    record = files.convert(record, part.record_type)
                out.write(part.name, record)
                if files is not None:
                    files.release()
                progress.update()
        return out.counts
