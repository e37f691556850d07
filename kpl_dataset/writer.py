"""WriteOnlyDataset: validate records, write immutable Arrow IPC shards, commit a manifest."""

from __future__ import annotations

import contextlib
import errno
import functools
import mmap
import os
import uuid
import weakref
from typing import Any

import pyarrow as pa

from kpl_dataset import arrays
from kpl_dataset.checksum import Digest
from kpl_dataset.errors import (
    DatasetNotFoundError,
    DatasetOSError,
    DatasetTypeError,
    DatasetValueError,
    KPLDatasetError,
)
from kpl_dataset.files import PREVIEW_BYTES, FileType, copy_to, read_source
from kpl_dataset.fs import Location, resolve, sync_dir
from kpl_dataset.manifest import (
    Batch,
    Manifest,
    Shard,
    load_manifest,
    now,
    part_folder,
)
from kpl_dataset.metadb import MetaDB
from kpl_dataset.names import check_part_name, manifest_name
from kpl_dataset.schema import FieldError, RecordChecker, to_arrow_schema

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None


class _Resources:
    """OS handles a writer holds; released even when the writer is dropped without close()."""

    def __init__(self) -> None:
        self.lock_fd: int | None = None
        self.lock_path: str | None = None
        self.file: Any = None

    def release(self) -> None:
        if self.file is not None:
            with contextlib.suppress(OSError, pa.ArrowException):
                self.file.close()
            self.file = None
        if self.lock_fd is not None:
            # Unlink while still holding the lock: a writer that opened this file before
            # sees it is no longer the lock file and starts over (see _lock).
            with contextlib.suppress(OSError):
                os.unlink(self.lock_path)
            os.close(self.lock_fd)
            self.lock_fd = None


_MAP_SLICE = 8 << 20  # bytes of a file-mapped value written (and then let go) at a time


def _nothing() -> None:
    """Do nothing."""


class _ShardWriter:
    """One Arrow IPC file being written; records each batch's byte range and checksums."""

    def __init__(self, loc: Location, name: str, schema: pa.Schema, res: _Resources, durable: bool):
        self._loc = loc
        self.name = name
        self.tmp = name + ".tmp" if loc.local else name
        self._res = res
        self._durable = durable
        # S3 objects appear whole on close, so remote shards need no temp name (a rename is a copy there).
        if loc.local:
            # Unbuffered: Arrow hands over whole buffers that a Python buffer would only copy again.
            res.file = open(loc.path(self.tmp), "wb", buffering=0)  # noqa: SIM115 - closed by finish()/discard()
        else:
            res.file = loc.fs.open_output_stream(loc.path(name))  # noqa: SIM115 - owned by _Resources
        self.pos = 0
        self._digest = Digest()
        self.rows = 0
        self.batches: list[Batch] = []
        self._sink = pa.PythonFile(self, mode="w")
        self._ipc = pa.ipc.new_file(self._sink, schema)

    # File protocol used by pa.PythonFile.
    closed = False
    # read-only file maps the batch being written takes its values from (see _mapped_slices)
    file_maps: list[mmap.mmap] = []

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        for piece, done in self._mapped_slices(data, view):
            f = self._res.file
            if self._loc.local:
                rest = piece
                while rest:  # a raw file may take less than asked
                    rest = rest[f.write(rest) :]
            else:
                f.write(piece)
            self.pos += len(piece)
            self._digest.update(piece)
            done()
        return len(view)

    def _mapped_slices(self, data: Any, view: memoryview) -> Any:
        """Yield (piece, done) of VIEW; pieces of a read-only file map are dropped from memory once written.

        A value an importer spooled to a file reaches Arrow as a map of that file; writing it
        whole would make every page of it resident at once. Its pages are clean copies of
        the file, so they are let go (MADV_DONTNEED) a slice at a time.
        """
        address = getattr(data, "address", None)
        for mapped in self.file_maps if address is not None and hasattr(mmap.mmap, "madvise") else ():
            offset = address - pa.py_buffer(mapped).address
            inside = offset >= 0 and offset + len(view) <= len(mapped)
            if inside and offset % mmap.PAGESIZE == 0:
                for at in range(0, len(view), _MAP_SLICE):
                    length = min(_MAP_SLICE, len(view) - at)
                    drop = functools.partial(mapped.madvise, mmap.MADV_DONTNEED, offset + at, length)
                    yield view[at : at + length], drop
                return
        yield view, _nothing

    def flush(self) -> None:
        """Do nothing: finish() flushes once (a flush on S3 would start a multipart upload)."""

    def close(self) -> None:
        """Do nothing: the IPC writer must not close the underlying file."""

    def write_batch(self, batch: pa.RecordBatch) -> None:
        start = self.pos
        self._digest = Digest()
        self._ipc.write_batch(batch)
        d = self._digest
        self.batches.append(Batch(start, self.pos - start, batch.num_rows, d.crc, d.sum64))
        self.rows += batch.num_rows

    def finish(self) -> Shard:
        """Write the footer, make the file durable if asked and give it its final name."""
        self._ipc.close()
        f = self._res.file
        if self._loc.local and self._durable:
            os.fsync(f.fileno())
        f.close()
        self._res.file = None
        if self._loc.local:
            os.replace(self._loc.path(self.tmp), self._loc.path(self.name))
        return Shard(self.name, self.rows, self.pos, self.batches, self._digest.kind)

    def discard(self) -> None:
        """Close and delete the unfinished file."""
        f, self._res.file = self._res.file, None
        if f is not None:
            with contextlib.suppress(OSError, pa.ArrowException):
                f.close()
        self._loc.delete(self.tmp)


def _lock(loc: Location, part: str, res: _Resources) -> None:
    """Take the single-writer lock of a local part (released by the OS if the process dies)."""
    if not loc.local or fcntl is None:
        return
    path = loc.path(f".{part}.lock")
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if err.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise KPLDatasetError(
                    f"part {part!r} in {loc.root} is being written by another writer; close it first"
                ) from None
            raise
        try:
            current = os.stat(path).st_ino
        except FileNotFoundError:
            current = None
        if current == os.fstat(fd).st_ino:
            res.lock_fd, res.lock_path = fd, path
            return
        os.close(fd)  # the previous holder removed this file as it finished: take the new one


class WriteOnlyDataset:
    """Write records of one record_type into a named part of a dataset folder.

    mode="w" replaces the part when close() commits; mode="a" appends shards to it.
    Nothing written becomes visible before close(); a writer that is never closed
    leaves the previously committed part (or nothing) in place. durable=True also
    fsyncs every shard, file and the manifest before the commit, so that the commit
    survives a power loss (a process crash never needs it). nullable names top-level
    fields that may hold None (readers before this option refuse such a part).
    """

    VERSION = 2

    def __init__(
        self,
        data_dir: Any,
        data_name: str | None = None,
        record_type: dict | None = None,
        mode: str = "w",
        *,
        filesystem: Any = None,
        durable: bool = False,
        batch_rows: int = 1024,
        batch_bytes: int = 4 << 20,  # a batch is checked, then copied: 4 MiB stays in cache
        shard_rows: int = 1 << 20,
        shard_bytes: int = 256 << 20,
        nullable: Any = (),
    ):
        if mode not in ("w", "a"):
            raise KPLDatasetError(f"mode must be 'w' or 'a', got {mode!r}")
        self._loc = resolve(data_dir, filesystem)
        self._part = check_part_name(data_name)
        self._mode = mode
        self._durable = bool(durable)
        self._folder = part_folder(self._part)
        self._limits = (max(1, batch_rows), max(1, batch_bytes), max(1, shard_rows), max(1, shard_bytes))
        self._token = uuid.uuid4().hex[:16]
        self._res = _Resources()
        self._finalizer = weakref.finalize(self, self._res.release)
        self._closed = True
        self._made_root = self._loc.local and not os.path.isdir(self._loc.root)
        self._loc.makedirs()
        self._folder_ready = False
        try:
            _lock(self._loc, self._part, self._res)
            self._old = self._load_old()
            self._record_type = self._choose_record_type(record_type, nullable)
            self._schema = to_arrow_schema(self._record_type, self._nullable)
            self._checker = RecordChecker(self._record_type, self._encode_file, self._nullable)
            self._remove_orphans()
        except BaseException:
            self._res.release()
            self._remove_empty_folders()
            raise
        self._columns: list[list] = [[] for _ in self._schema]
        self._maps: list[mmap.mmap] = []  # memory-mapped values of the pending batch
        self._pending_rows = 0
        self._pending_bytes = 0
        self._count = 0
        self._file_count = 0
        self._shard: _ShardWriter | None = None
        self._shards: list[Shard] = []
        self._new_files: list[dict] = []
        self._closed = False

    @property
    def record_type(self) -> dict:
        return self._record_type

    @property
    def arrow_schema(self) -> pa.Schema:
        """Return the Arrow schema batches of this part have (nullable fields marked)."""
        return self._schema

    def _load_old(self) -> Manifest | None:
        try:
            return load_manifest(self._loc, self._part)
        except KPLDatasetError:
            if self._mode == "a":
                raise
            return None  # a damaged part is simply replaced in mode "w"

    def _choose_record_type(self, record_type: dict | None, nullable: Any) -> dict:
        self._nullable = list(nullable)
        if record_type is None:
            if self._mode == "a" and self._old is not None:
                self._nullable = self._old.nullable
                return self._old.record_type
            raise DatasetTypeError("record_type is required to create a dataset part")
        schema = to_arrow_schema(record_type, self._nullable)
        self._nullable = [f.name for f in schema if f.nullable]
        if self._mode == "a" and self._old is not None and not schema.equals(self._old.schema):
            raise KPLDatasetError(
                f"record_type differs from the one of part {self._part!r}; "
                f"existing: {self._old.record_type!r}, given: {record_type!r}"
            )
        return record_type

    def _remove_orphans(self) -> None:
        """Delete leftovers of crashed writers: anything in the part folder the manifest does not name."""
        keep = set()
        if self._old is not None:
            keep = {s.path for s in self._old.shards} | {f["path"] for f in self._old.files}
        for name in self._loc.list(self._folder, recursive=True):
            if name not in keep:
                self._loc.delete(name)
        prefix = f".{manifest_name(self._part)}."
        for name in self._loc.list():
            if name.startswith(prefix) and name.endswith(".tmp"):
                self._loc.delete(name)

    def _ensure_folder(self, sub: str = "") -> None:
        """Create the part folder (or a sub-folder) when the first file goes there."""
        self._loc.makedirs(f"{self._folder}/{sub}" if sub else self._folder)
        self._folder_ready = True

    def _remove_empty_folders(self) -> None:
        """Remove the part folder, and the dataset folder this writer made, when left empty."""
        if not self._loc.local:
            return  # object stores have no empty folders to leave behind
        for folder in (f"{self._folder}/files", self._folder):
            with contextlib.suppress(OSError):
                os.rmdir(self._loc.path(folder))
        if self._made_root:
            with contextlib.suppress(OSError):
                os.rmdir(self._loc.root)

    def _encode_file(self, path: str, acc: list) -> dict:
        try:
            size, data, form = read_source(path)
        except OSError as err:
            kind = DatasetNotFoundError if isinstance(err, FileNotFoundError) else DatasetOSError
            raise FieldError(f"cannot read file {path!r}: {err.strerror or err}", kind=kind) from None
        acc[0] += len(data)
        if form == FileType.Small:
            return {"type": FileType.Small, "content": data, "file_path": "", "size": size}
        if not self._file_count:
            self._ensure_folder("files")
        rel = f"{self._folder}/files/{self._token}-{self._file_count:06d}"
        self._file_count += 1
        self._new_files.append({"path": rel, "size": size})
        try:
            copy_to(self._loc, path, rel, durable=self._durable)
        except OSError as err:
            raise FieldError(
                f"cannot copy file {path!r} into the dataset: {err}", kind=DatasetOSError
            ) from None
        return {"type": FileType.Large, "content": data[:PREVIEW_BYTES], "file_path": rel, "size": size}

    def get_meta_db(self) -> MetaDB:
        """Return the part's key/value store."""
        return MetaDB(self._loc, self._part)

    def write(self, value: dict) -> None:
        """Validate one record and buffer it; a bad record raises and is not written."""
        if self._closed:
            raise DatasetValueError("write() on a closed WriteOnlyDataset")
        values, nbytes = self._checker.check(value, self._count)
        if nbytes >= self._limits[1]:
            self._flush()  # a record larger than a batch gets a batch of its own: its bytes are not copied
            self._maps = [v for v in values if isinstance(v, mmap.mmap)]
        for column, v in zip(self._columns, values, strict=True):
            column.append(v)
        self._count += 1
        self._pending_rows += 1
        self._pending_bytes += nbytes
        if self._pending_rows >= self._limits[0] or self._pending_bytes >= self._limits[1]:
            self._flush()

    def write_batch(self, batch: pa.RecordBatch) -> None:
        """Write an Arrow record batch of this part's schema (cast when only types' nullability differ)."""
        if self._closed:
            raise DatasetValueError("write_batch() on a closed WriteOnlyDataset")
        if any(v == "File" for v in self._record_type.values()):
            # a large File value names a file of the dataset it came from, which this part does not hold
            raise DatasetTypeError("write_batch() does not take File fields; write() their records")
        if batch.schema.names != self._schema.names:
            raise DatasetTypeError(
                f"batch fields {batch.schema.names} differ from the part's {self._schema.names}"
            )
        for field, column in zip(self._schema, batch.columns, strict=True):
            if column.null_count and not field.nullable:
                raise DatasetValueError(
                    f"records {self._count}..: field {field.name} holds nulls but is not nullable"
                )
        try:
            batch = batch.cast(self._schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
            raise DatasetTypeError(f"batch does not match the part's schema: {err}") from None
        if not batch.num_rows:
            return
        self._flush()
        self._count += batch.num_rows
        self._write(batch)

    def _flush(self) -> None:
        if not self._pending_rows:
            return
        first = self._count - self._pending_rows
        try:
            cols = [arrays.build(c, f.type, f.name) for c, f in zip(self._columns, self._schema, strict=True)]
        except KPLDatasetError as err:
            raise KPLDatasetError(f"records {first}..{self._count - 1}: {err}") from None
        batch = pa.RecordBatch.from_arrays(cols, schema=self._schema)
        self._columns = [[] for _ in self._schema]
        self._pending_rows = 0
        self._pending_bytes = 0
        self._write(batch)

    def _write(self, batch: pa.RecordBatch) -> None:
        if self._shard is None:
            if not self._folder_ready:
                self._ensure_folder()
            name = f"{self._folder}/{self._token}-{len(self._shards):05d}.arrow"
            self._shard = _ShardWriter(self._loc, name, self._schema, self._res, self._durable)
        self._shard.file_maps, self._maps = self._maps, []
        try:
            self._shard.write_batch(batch)
        finally:
            self._shard.file_maps = []
        if self._shard.rows >= self._limits[2] or self._shard.pos >= self._limits[3]:
            self._finish_shard()

    def _finish_shard(self) -> None:
        if self._shard is not None:
            shard, self._shard = self._shard, None
            self._shards.append(shard.finish())

    def close(self) -> None:
        """Commit: write remaining records, then atomically publish the new manifest."""
        if self._closed:
            return
        try:
            self._flush()
            self._finish_shard()
            if self._loc.local and self._durable and self._folder_ready:
                sync_dir(self._loc.path(self._folder))
            old = self._old if self._mode == "a" else None
            manifest = Manifest(
                name=self._part,
                record_type=self._record_type,
                schema=self._schema,
                created=old.created if old else now(),
                updated=now(),
                shards=(old.shards if old else []) + self._shards,
                files=(old.files if old else []) + self._new_files,
                nullable=self._nullable,
            )
            self._loc.write_atomic(manifest_name(self._part), manifest.to_json(), durable=self._durable)
        except BaseException:
            self._discard()
            raise
        self._closed = True
        if self._mode == "w" and self._old is not None:
            for name in [s.path for s in self._old.shards] + [f["path"] for f in self._old.files]:
                self._loc.delete(name)
        self._res.release()
        self._remove_empty_folders()

    def abort(self) -> None:
        """Drop everything written by this writer; the committed part stays as it was."""
        if not self._closed:
            self._discard()

    def _discard(self) -> None:
        self._closed = True
        if self._shard is not None:
            self._shard.discard()
            self._shard = None
        for name in [s.path for s in self._shards] + [f["path"] for f in self._new_files]:
            self._loc.delete(name)
        self._res.release()
        self._remove_empty_folders()

    def __enter__(self) -> WriteOnlyDataset:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
