"""The per-part JSON manifest: the commit point naming every shard and large file."""

from __future__ import annotations

import base64
import hashlib
import json
import posixpath
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa

from kpl_dataset.checksum import CRC_KINDS
from kpl_dataset.errors import KPLDatasetError
from kpl_dataset.fs import Location, resolve
from kpl_dataset.names import manifest_name, part_of
from kpl_dataset.schema import to_arrow_schema

FORMAT = "kpl-dataset"
VERSION = 2


def part_folder(part: str) -> str:
    """Return the folder holding a part's shards and large files."""
    return part + ".kpl"


def now() -> str:
    """Return the current UTC time as ISO 8601."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass
class Batch:
    """One record batch: its byte range in the shard, row count and checksums of those bytes."""

    offset: int
    length: int
    rows: int
    crc: int  # of the kind its shard names
    sum64: int


@dataclass
class Shard:
    """One immutable Arrow IPC file."""

    path: str
    rows: int
    bytes: int
    batches: list[Batch]
    crc: str = "crc32"  # which CRC its batches hold: "crc32" (zlib) or "crc32c"


@dataclass
class Manifest:
    """The committed state of one part."""

    name: str
    record_type: dict
    schema: pa.Schema
    created: str
    updated: str
    shards: list[Shard] = field(default_factory=list)
    files: list[dict] = field(default_factory=list)
    nullable: list[str] = field(default_factory=list)  # top-level fields that may hold None

    @property
    def num_rows(self) -> int:
        return sum(s.rows for s in self.shards)

    def to_json(self) -> bytes:
        """Serialise to the on-disk JSON."""
        doc = {
            "format": FORMAT,
            "version": VERSION,
            "name": self.name,
            "created": self.created,
            "updated": self.updated,
            "record_type": self.record_type,
            "arrow_schema": base64.b64encode(self.schema.serialize().to_pybytes()).decode(),
            "num_rows": self.num_rows,
            "shards": [
                {
                    "path": s.path,
                    "rows": s.rows,
                    "bytes": s.bytes,
                    **({} if s.crc == "crc32" else {"crc": s.crc}),
                    "batches": [[b.offset, b.length, b.rows, b.crc, f"{b.sum64:016x}"] for b in s.batches],
                }
                for s in self.shards
            ],
            "files": self.files,
            **({"nullable": self.nullable} if self.nullable else {}),
        }
        return json.dumps(doc, ensure_ascii=False, indent=1).encode()


def content_hash(manifest: Manifest) -> str:
    """Return the SHA-256 of a part's records and schema as its manifest states them.

    Its fields' types, which may hold nulls, and each stored batch's rows and checksums (of the
    batch's bytes): the same records written the same way (the same batch cuts) give the same
    hash whatever the shards are named and whenever they were written. No data is read.
    """
    doc = {
        "record_type": manifest.record_type,
        "nullable": manifest.nullable,
        "batches": [[b.rows, b.crc, b.sum64] for s in manifest.shards for b in s.batches],
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def _int(value: Any, what: str, where: str) -> int:
    if type(value) is not int or value < 0:
        raise KPLDatasetError(f"{where}: {what} must be a non-negative integer, got {value!r}")
    return value


def _hex64(value: Any, where: str) -> int:
    if not isinstance(value, str) or len(value) != 16 or value.strip("0123456789abcdef"):
        raise KPLDatasetError(f"{where}: sum64 must be 16 lowercase hex digits, got {value!r}")
    return int(value, 16)


def _member_path(value: Any, part: str, what: str, where: str) -> str:
    """Accept only a normalised relative path inside the part's folder (manifests are untrusted)."""
    folder = part_folder(part) + "/"
    if (
        not isinstance(value, str)
        or not value.startswith(folder)
        or posixpath.normpath(value) != value
        or ".." in value.split("/")
    ):
        raise KPLDatasetError(f"{where}: {what} {value!r} is not a file inside {folder}")
    return value


def parse_manifest(data: bytes, part: str, where: str) -> Manifest:
    """Parse and check a manifest; every problem names the file and the field."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as err:
        raise KPLDatasetError(f"{where}: not valid JSON ({err})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise KPLDatasetError(f"{where}: not a kpl-dataset manifest (format field missing or wrong)")
    if doc.get("version") != VERSION:
        raise KPLDatasetError(
            f"{where}: unsupported format version {doc.get('version')!r} (this reader: {VERSION})"
        )
    for key in ("record_type", "arrow_schema", "shards", "num_rows", "created", "updated"):
        if key not in doc:
            raise KPLDatasetError(f"{where}: field {key!r} missing")
    try:
        schema = to_arrow_schema(doc["record_type"], doc.get("nullable", []))
        nullable = [f.name for f in schema if f.nullable]
    except KPLDatasetError as err:
        raise KPLDatasetError(f"{where}: {err}") from None
    try:
        stored = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(doc["arrow_schema"], validate=True)))
    except (ValueError, TypeError, OSError, pa.ArrowException) as err:
        raise KPLDatasetError(f"{where}: field 'arrow_schema' is not a base64 Arrow schema ({err})") from None
    if not stored.equals(schema):
        raise KPLDatasetError(f"{where}: 'arrow_schema' does not match 'record_type'")
    if not isinstance(doc["shards"], list):
        raise KPLDatasetError(f"{where}: field 'shards' must be a list")
    shards = []
    for i, s in enumerate(doc["shards"]):
        at = f"{where}: shards[{i}]"
        if not isinstance(s, dict) or not isinstance(s.get("batches"), list):
            raise KPLDatasetError(f"{at}: must be an object with a 'batches' list")
        path = _member_path(s.get("path"), part, "path", at)
        rows = _int(s.get("rows"), "rows", at)
        size = _int(s.get("bytes"), "bytes", at)
        kind = s.get("crc", "crc32")
        if kind not in CRC_KINDS:
            raise KPLDatasetError(f"{at}: crc must be one of {list(CRC_KINDS)}, got {kind!r}")
        batches = []
        end = 0
        for j, b in enumerate(s["batches"]):
            if not isinstance(b, list) or len(b) != 5:
                raise KPLDatasetError(f"{at}.batches[{j}]: must be [offset, length, rows, crc, sum64]")
            offset, length, brows, crc = (_int(v, "value", f"{at}.batches[{j}]") for v in b[:4])
            total = _hex64(b[4], f"{at}.batches[{j}]")
            if offset < end or offset + length > size or length == 0:
                raise KPLDatasetError(
                    f"{at}.batches[{j}]: byte range {offset}+{length} out of order or past bytes"
                )
            end = offset + length
            batches.append(Batch(offset, length, brows, crc, total))
        if sum(b.rows for b in batches) != rows:
            raise KPLDatasetError(f"{at}: rows {rows} differs from the sum of its batches")
        shards.append(Shard(path, rows, size, batches, kind))
    total = _int(doc["num_rows"], "num_rows", where)
    if total != sum(s.rows for s in shards):
        raise KPLDatasetError(f"{where}: num_rows {total} differs from the sum of its shards")
    files = doc.get("files", [])
    if not isinstance(files, list) or not all(isinstance(f, dict) for f in files):
        raise KPLDatasetError(f"{where}: field 'files' must be a list of objects")
    for i, f in enumerate(files):
        _member_path(f.get("path"), part, "path", f"{where}: files[{i}]")
    return Manifest(
        name=part,
        record_type=doc["record_type"],
        schema=schema,
        created=str(doc["created"]),
        updated=str(doc["updated"]),
        shards=shards,
        files=files,
        nullable=nullable,
    )


def load_manifest(loc: Location, part: str) -> Manifest | None:
    """Read a part's committed manifest, or None when the part was never committed."""
    name = manifest_name(part)
    try:
        data = loc.read_bytes(name)
    except FileNotFoundError:
        return None
    except (OSError, pa.ArrowException) as err:
        raise KPLDatasetError(f"{loc.describe(name)}: cannot read ({err})") from err
    return parse_manifest(data, part, loc.describe(name))


def list_parts(data_dir: Any, filesystem: Any = None) -> list[str]:
    """Return the names of the committed parts in a dataset folder, sorted."""
    loc = resolve(data_dir, filesystem)
    return sorted(part for part in map(part_of, loc.list()) if part is not None)
