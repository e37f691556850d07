"""ReadOnlyDataset: memory-mapped, random-access reads of a committed dataset part."""

from __future__ import annotations

import bisect
import mmap
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterator
from itertools import islice
from typing import Any, BinaryIO

import pyarrow as pa

from kpl_dataset import arrays
from kpl_dataset.checksum import crc, sum64
from kpl_dataset.errors import DatasetNotFoundError, KPLDatasetError
from kpl_dataset.files import open_file_value
from kpl_dataset.fs import Location, resolve
from kpl_dataset.manifest import Manifest, Shard, list_parts, load_manifest
from kpl_dataset.metadb import MetaDB
from kpl_dataset.names import DEFAULT_PART, check_part_name

_ARROW_MAGIC = b"ARROW1"
_REMOTE_CACHE = 8  # record batches kept in memory per reader on remote filesystems


class _ShardFile:
    """An opened shard: a memory map locally, a random-access stream remotely."""

    def __init__(self, loc: Location, shard: Shard):
        self.where = loc.describe(shard.path)
        self._lock = threading.Lock()
        self._file: Any = None
        # Python's map locally: slicing it makes a value's bytes in one copy (see arrays.values).
        self.map: mmap.mmap | None = None
        try:
            if loc.local:
                with open(loc.path(shard.path), "rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    if size == shard.bytes and size:
                        self.map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                        if hasattr(mmap, "MADV_WILLNEED"):  # read ahead when cold, as Arrow's map did
                            self.map.madvise(mmap.MADV_WILLNEED)
            else:
                self._file = loc.fs.open_input_file(loc.path(shard.path))
                size = self._file.size()
        except FileNotFoundError:
            raise KPLDatasetError(f"{self.where}: shard named by the manifest is missing") from None
        except (OSError, ValueError, pa.ArrowException) as err:
            raise KPLDatasetError(f"{self.where}: cannot open shard ({err})") from err
        if size != shard.bytes:
            self.close()
            raise KPLDatasetError(f"{self.where}: shard has {size} bytes, the manifest says {shard.bytes}")
        self._whole = pa.py_buffer(self.map) if self.map is not None else None

    def read(self, offset: int, length: int) -> pa.Buffer:
        if self._whole is not None:
            return self._whole.slice(offset, length)
        with self._lock:
            try:
                self._file.seek(offset)
                return self._file.read_buffer(length)
            except (OSError, pa.ArrowException) as err:
                raise KPLDatasetError(f"{self.where}: cannot read bytes {offset}+{length} ({err})") from err

    def close(self) -> None:
        # The map is not closed here: values and arrays that view it keep it; it goes with the last.
        self._whole = self.map = None
        if self._file is not None:
            self._file.close()


class _RowFunctions(dict):
    """Batch -> row function; a missing one is built on first use (iteration never needs them)."""

    def __init__(self, build: Any):
        super().__init__()
        self._build = weakref.WeakMethod(build)  # no cycle: a dropped reader unmaps at once

    def __missing__(self, g: int) -> Any:
        return self._build()(g)


class ReadOnlyDataset:
    """Read a dataset part: iteration, next(), reader[i], slices, Arrow batches.

    data_name None opens the part "root", or the first part when there is no "root".
    columns=[...] reads only those top-level fields. zero_copy=True returns top-level
    ByteArray fields as read-only memoryviews of the mapped shard instead of bytes; each
    view keeps its buffer (and the map) alive, so it stays valid after close().

    Every record batch is checked the first time this process touches it: its structure
    always (row count, offsets, Arrow validation), and its bytes against the manifest's
    checksums as verify says: True / "fast" (default) the 64-bit word sum, "full" also
    the CRC (CRC-32 or CRC-32C, as the shard says), False none. A projected read (columns=) checks structure only.
    """

    def __init__(
        self,
        data_dir: Any,
        data_name: str | None = None,
        *,
        columns: list[str] | None = None,
        verify: bool | str = True,
        filesystem: Any = None,
        zero_copy: bool = False,
    ):
        self._args = (data_dir, data_name, columns, verify, filesystem, zero_copy)
        self._zero_copy = bool(zero_copy)
        self._loc = resolve(data_dir, filesystem)
        self._part = self._choose_part(data_name)
        manifest = load_manifest(self._loc, self._part)
        if manifest is None:
            raise DatasetNotFoundError(
                f"part {self._part!r} not found in {self._loc.root}{self._legacy_hint()}"
            )
        self._manifest: Manifest = manifest
        if verify not in (True, False, "fast", "full"):
            raise KPLDatasetError(f"verify must be True, False, 'fast' or 'full', got {verify!r}")
        self._verify = "fast" if verify is True else verify
        full = manifest.schema
        if columns is None:
            self._select = None
            names = list(full.names)
        else:
            missing = [c for c in columns if c not in full.names]
            if missing:
                raise KPLDatasetError(f"columns {missing} not in the dataset; fields: {full.names}")
            names = list(dict.fromkeys(columns))
            self._select = [full.get_field_index(c) for c in names]
        self._names = names
        self.record_type = {k: manifest.record_type[k] for k in names}
        self.nullable = [k for k in names if k in manifest.nullable]
        self.arrow_schema = pa.schema([full.field(k) for k in names])
        self._starts: list[int] = []
        self._counts: list[int] = []
        self._where: list[tuple[int, int]] = []
        row = 0
        for s, shard in enumerate(manifest.shards):
            for b, batch in enumerate(shard.batches):
                self._starts.append(row)
                self._counts.append(batch.rows)
                self._where.append((s, b))
                row += batch.rows
        self._len = row
        self._cursor = 0
        self._open_state()

    def _open_state(self) -> None:
        self._pid = os.getpid()
        self._files: dict[int, _ShardFile] = {}
        self._batches: OrderedDict[int, list[pa.Array]] = OrderedDict()
        self._rows = _RowFunctions(self._row)  # batch -> (row -> record dict), made on first lookup

    def _choose_part(self, data_name: str | None) -> str:
        if data_name is not None:
            return check_part_name(data_name)
        parts = list_parts(self._loc.root, self._loc.fs)
        if DEFAULT_PART in parts:
            return DEFAULT_PART
        if parts:
            return parts[0]
        raise DatasetNotFoundError(f"Not found dataset in `{self._loc.root}`{self._legacy_hint()}")

    def _legacy_hint(self) -> str:
        try:
            names = self._loc.list()
        except (OSError, KPLDatasetError):
            return ""
        if any(n.endswith((".meta", ".data")) for n in names):
            return " (it looks like a kpl-dataset 0.0.9 folder: convert it with `kpl-dataset legacy`)"
        return ""

    # Pickling reopens the files in the receiving process (DataLoader workers).
    def __reduce__(self) -> tuple:
        data_dir, data_name, columns, verify, filesystem, zero_copy = self._args
        return _reopen, (data_dir, self._part, columns, verify, filesystem, zero_copy)

    @property
    def schema(self) -> dict:
        return self.record_type

    @property
    def data_name(self) -> str:
        return self._part

    @property
    def manifest(self) -> Manifest:
        return self._manifest

    def __len__(self) -> int:
        return self._len

    def _shard(self, s: int) -> _ShardFile:
        f = self._files.get(s)
        if f is None:
            f = self._files[s] = _ShardFile(self._loc, self._manifest.shards[s])
        return f

    def _batch(self, g: int) -> list[pa.Array]:
        """Return the (projected) column arrays of global batch g, loading and checking it once."""
        if self._pid != os.getpid():
            self._open_state()
        cols = self._batches.get(g)
        if cols is not None:
            return cols
        s, b = self._where[g]
        shard = self._manifest.shards[s]
        meta = shard.batches[b]
        buf = self._shard(s).read(meta.offset, meta.length)
        checked = self._verify and self._select is None
        if checked and (
            sum64(buf) != meta.sum64 or (self._verify == "full" and crc(shard.crc, buf) != meta.crc)
        ):
            raise KPLDatasetError(f"{self._describe(g)}: checksum mismatch, the file is damaged")
        try:
            batch = self._decode(buf)
        except KPLDatasetError as err:
            raise KPLDatasetError(f"{self._describe(g)}: {err}") from None
        except Exception as err:  # any failure to parse untrusted bytes is damage
            raise KPLDatasetError(
                f"{self._describe(g)}: damaged record batch ({type(err).__name__}: {err})"
            ) from None
        if batch.num_rows != meta.rows:
            raise KPLDatasetError(
                f"{self._describe(g)}: holds {batch.num_rows} records, the manifest says {meta.rows}"
            )
        cols = batch.columns
        for field, c in zip(self.arrow_schema, cols, strict=True):
            if c.null_count and not field.nullable:
                raise KPLDatasetError(
                    f"{self._describe(g)}: field {field.name} holds nulls but is not nullable"
                )
        self._batches[g] = cols
        if not self._loc.local and len(self._batches) > _REMOTE_CACHE:
            old, _ = self._batches.popitem(last=False)
            self._rows.pop(old, None)
        return cols

    def _row(self, g: int) -> Any:
        """Build, keep and return row -> record of batch g (on its first random access)."""
        cols = self._batch(g)
        try:
            row = self._rows[g] = arrays.row_function(
                self._names, [arrays.getter(c, self._zero_copy) for c in cols]
            )
        except Exception as err:  # a buffer of the wrong size is damage too
            raise KPLDatasetError(
                f"{self._describe(g)}: damaged record batch ({type(err).__name__}: {err})"
            ) from None
        return row

    def _describe(self, g: int) -> str:
        s, b = self._where[g]
        first = self._starts[g]
        return f"{self._loc.describe(self._manifest.shards[s].path)}: batch {b} (records {first}..{first + self._counts[g] - 1})"

    def _decode(self, buf: pa.Buffer) -> pa.RecordBatch:
        stream = pa.BufferReader(buf)
        if buf.size >= 8 and buf.slice(0, 6).to_pybytes() == _ARROW_MAGIC:
            stream.seek(8)  # the first batch's range starts with the file magic and schema message
            if pa.ipc.read_message(stream).type != "schema":
                raise KPLDatasetError("expected the schema message after the file magic")
        message = pa.ipc.read_message(stream)
        if message.type != "record batch":
            raise KPLDatasetError(f"expected a record batch message, found {message.type!r}")
        batch = pa.ipc.read_record_batch(message, self._manifest.schema)
        if self._select is not None:
            batch = batch.select(self._select)
        batch.validate(full=True)
        return batch

    def __getitem__(self, idx: Any) -> Any:
        i = idx if type(idx) is int else None
        if i is None:
            if isinstance(idx, slice):  # unknown to the original: leaves the cursor alone
                cursor = self._cursor
                records = [self[i] for i in range(*idx.indices(self._len))]
                self._cursor = cursor
                return records
            i = int(idx)
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError(f"record index {idx} out of range for {self._len} records")
        g = bisect.bisect_right(self._starts, i) - 1
        row = self._rows.get(g)
        if row is None:
            self._batch(g)
            row = self._rows[g]
        record = row(i - self._starts[g])
        self._cursor = i + 1  # next() continues after it, as in the original
        return record

    def next(self) -> dict:
        """Return the record at the cursor and advance it; StopIteration at the end."""
        if self._cursor >= self._len:
            raise StopIteration
        return self[self._cursor]

    def __next__(self) -> dict:
        return self.next()

    def __iter__(self) -> Iterator[dict]:
        """Yield the records from the cursor to the end, moving the cursor along."""
        make = arrays.record_function(self._names)
        while self._cursor < self._len:
            g = bisect.bisect_right(self._starts, self._cursor) - 1
            cols = self._batch(g)
            skip = self._cursor - self._starts[g]
            source = self._files[self._where[g][0]].map
            try:
                columns = [arrays.values(c, self._zero_copy, source) for c in cols]
            except Exception as err:  # a buffer of the wrong size is damage too
                raise KPLDatasetError(f"{self._describe(g)}: damaged record batch ({err})") from None
            if skip:
                columns = [islice(c, skip, None) for c in columns]
            for record in map(make, *columns) if columns else ({} for _ in range(self._counts[g] - skip)):
                self._cursor += 1
                yield record

    def reset(self) -> None:
        """Move the cursor back to the first record."""
        self._cursor = 0

    def drop_pages(self) -> None:
        """Drop the mapped shards' pages from this process; touched again, they come back from the page cache."""
        for f in self._files.values():
            if f.map is not None and hasattr(mmap, "MADV_DONTNEED"):
                f.map.madvise(mmap.MADV_DONTNEED)  # clean, read-only file pages: nothing is lost

    def close(self) -> None:
        """Release memory maps and open files; the reader reopens them if used again."""
        for f in self._files.values():
            f.close()
        self._open_state()

    def __enter__(self) -> ReadOnlyDataset:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def iter_batches(self, batch_size: int | None = None) -> Iterator[pa.RecordBatch]:
        """Yield Arrow record batches (as stored, or re-cut to batch_size rows)."""
        schema = self.arrow_schema
        pending: list[pa.RecordBatch] = []
        pending_rows = 0
        for g in range(len(self._starts)):
            batch = pa.RecordBatch.from_arrays(self._batch(g), schema=schema)
            if batch_size is None:
                yield batch
                continue
            while batch.num_rows:
                take = min(batch_size - pending_rows, batch.num_rows)
                pending.append(batch.slice(0, take))
                pending_rows += take
                batch = batch.slice(take)
                if pending_rows == batch_size:
                    yield pa.concat_batches(pending)
                    pending, pending_rows = [], 0
        if pending:
            yield pa.concat_batches(pending)

    def to_arrow(self) -> pa.Table:
        """Return the whole part as an Arrow table (zero-copy locally)."""
        return pa.Table.from_batches(list(self.iter_batches()), schema=self.arrow_schema)

    def to_pandas(self) -> Any:
        """Return the whole part as a pandas DataFrame (needs pandas)."""
        try:
            import pandas  # noqa: F401
        except ImportError:
            raise ImportError("to_pandas() needs pandas: pip install pandas") from None
        return self.to_arrow().to_pandas()

    def verify(self) -> None:
        """Read and check every record batch now (structure, word sum and CRC)."""
        saved = self._verify
        self._verify = "full"
        self.close()
        try:
            for g in range(len(self._starts)):
                self._batch(g)
        finally:
            self._verify = saved

    def get_meta_db(self) -> MetaDB:
        """Return the part's key/value store."""
        return MetaDB(self._loc, self._part)

    def open_file(self, value: dict) -> BinaryIO:
        """Open the full content of a File field value."""
        return open_file_value(self._loc, value)

    def read_file(self, value: dict) -> bytes:
        """Return the full content of a File field value."""
        with self.open_file(value) as f:
            return f.read()


def _reopen(
    data_dir: Any, part: str, columns: Any, verify: bool | str, filesystem: Any, zero_copy: bool
) -> ReadOnlyDataset:
    return ReadOnlyDataset(
        data_dir, part, columns=columns, verify=verify, filesystem=filesystem, zero_copy=zero_copy
    )
