"""Read files out of a folder, zip or tar without extracting them to disk.

Every byte is counted against the limits while it is inflated, so a bomb stops at the
first limit it crosses. Large entries go through an unlinked temporary file and reach
the writer as a read-only memory map, never as one more copy in memory.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import mmap
import os
import stat
import struct
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO

from kpl_dataset.importers.safety import ImportFailed, Limits, UnsafeEntry, decode_name, is_junk, safe_name

_CHUNK = 1 << 16
_INFLATE_CHUNK = 1 << 20
# Entries larger than this reach the writer through a temporary file and a memory map.
SPOOL_ABOVE = 16 << 20
# first bytes -> the decompressor of a compressed tar
_TAR_COMPRESSED = ((b"\x1f\x8b", gzip.GzipFile), (b"BZh", bz2.BZ2File), (b"\xfd7zXZ\x00", lzma.LZMAFile))
_JUNK_SHOWN = "__MACOSX, .DS_Store, Thumbs.db"
_ZIP_UTF8_FLAG = 0x800
_ZIP_ENCRYPTED_FLAG = 0x1
_ZIP_UNICODE_PATH_EXTRA = 0x7075
_ZIP_UNIX = 3
_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")
# What the standard library raises on damaged or hostile archives.
_ZIP_ERRORS = (
    zipfile.BadZipFile,
    OSError,
    EOFError,
    ValueError,
    struct.error,
    NotImplementedError,
    zlib.error,
)
_TAR_ERRORS = (tarfile.TarError, OSError, EOFError, ValueError, zlib.error, lzma.LZMAError)


def _scratch_file(near: Path) -> IO[bytes]:
    """Return an unlinked temporary file beside NEAR (same disk as the upload), else in the temp folder."""
    folder = near.parent if os.access(near.parent, os.W_OK) else None
    return tempfile.TemporaryFile(dir=folder)  # noqa: SIM115 - the caller closes it


@dataclass(frozen=True)
class Entry:
    """One regular file of a source: its clean path and declared size."""

    path: str
    size: int
    ref: object


class Source:
    """Regular files of an upload, checked and read with byte budgets."""

    def __init__(self, location: Path, limits: Limits) -> None:
        self.location = location
        self.limits = limits
        self._read_total = 0
        self._declared_total = 0
        self._entries: list[Entry] = []
        self._by_path: dict[str, Entry] = {}
        self.skipped_junk = 0

    @property
    def entries(self) -> list[Entry]:
        """Return the files in source order."""
        return self._entries

    def find(self, path: str) -> Entry | None:
        """Return the entry at PATH, if any."""
        return self._by_path.get(path)

    def _add(self, raw_name: str, size: int, ref: object) -> None:
        path = safe_name(raw_name)
        if is_junk(path):
            self.skipped_junk += 1
            return
        if path in self._by_path:
            raise UnsafeEntry(f"{raw_name!r}: duplicate entry for {path!r}")
        if len(self._entries) >= self.limits.max_entries:
            raise UnsafeEntry(f"{raw_name!r}: more than {self.limits.max_entries} entries")
        self.limits.check_file_size(path, size)
        self._declared_total += size
        self.limits.check_total(path, self._declared_total)
        entry = Entry(path, size, ref)
        self._entries.append(entry)
        self._by_path[path] = entry

    def _check_declared(self, compressed: int) -> None:
        self.limits.check_ratio(str(self.location), self._declared_total, compressed)

    def _count(self, entry: Entry, produced: int) -> None:
        """Charge PRODUCED real bytes of ENTRY against the limits."""
        self._read_total += produced
        self.limits.check_total(entry.path, self._read_total)

    def chunks(self, entry: Entry) -> Iterator[bytes]:
        """Yield the content of ENTRY piece by piece, counting the real bytes."""
        raise NotImplementedError

    def read(self, entry: Entry) -> bytes:
        """Return the whole content of ENTRY (for annotations the importer parses)."""
        return b"".join(self.chunks(entry))

    def content(self, entry: Entry) -> bytes | mmap.mmap:
        """Return the content of ENTRY for a record: bytes, or a read-only memory map when large."""
        if entry.size <= SPOOL_ABOVE:
            return self.read(entry)
        with _scratch_file(self.location) as spool:
            for piece in self.chunks(entry):
                spool.write(piece)
            spool.flush()
            return mmap.mmap(spool.fileno(), 0, access=mmap.ACCESS_READ)

    def close(self) -> None:
        """Release the underlying file."""

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read_counted(source: Source, entry: Entry, fp: BinaryIO, declared: int) -> Iterator[bytes]:
    """Yield FP to its end, refusing more than DECLARED bytes."""
    produced = 0
    while True:
        piece = fp.read(_CHUNK)
        if not piece:
            break
        produced += len(piece)
        if produced > declared:
            raise UnsafeEntry(f"{entry.path!r}: holds more bytes than its declared {declared}")
        source._count(entry, len(piece))
        yield piece
    if produced != declared:
        raise ImportFailed(
            f"{source.location}: damaged archive: {entry.path!r} ends after {produced} of its "
            f"{declared} bytes (truncated upload?)"
        )


class FolderSource(Source):
    """Files under a folder on disk; symlinks and special files are refused."""

    def __init__(self, location: Path, limits: Limits) -> None:
        super().__init__(location, limits)
        for dirpath, dirnames, filenames in os.walk(location, followlinks=False):
            dirnames.sort()
            rel_dir = os.path.relpath(dirpath, location)
            for name in [*dirnames, *sorted(filenames)]:
                full = os.path.join(dirpath, name)
                rel = name if rel_dir == "." else os.path.join(rel_dir, name)
                shown = decode_name(os.fsencode(rel))
                st = os.lstat(full)
                if stat.S_ISLNK(st.st_mode):
                    raise UnsafeEntry(f"{shown!r}: symbolic link refused")
                if stat.S_ISDIR(st.st_mode):
                    continue
                if not stat.S_ISREG(st.st_mode):
                    raise UnsafeEntry(f"{shown!r}: special file (device, fifo or socket) refused")
                self._add(shown, st.st_size, full)

    def chunks(self, entry: Entry) -> Iterator[bytes]:
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(str(entry.ref), flags)
        except OSError as exc:
            raise ImportFailed(f"{entry.path!r}: cannot open: {exc.strerror}") from None
        with os.fdopen(fd, "rb") as fp:
            if not stat.S_ISREG(os.fstat(fp.fileno()).st_mode):
                raise UnsafeEntry(f"{entry.path!r}: no longer a regular file")
            yield from _read_counted(self, entry, fp, entry.size)


def _zip_name(info: zipfile.ZipInfo) -> str:
    """Recover the real name of a zip entry whatever tool wrote it."""
    if info.flag_bits & _ZIP_UTF8_FLAG:
        return info.filename
    extra = info.extra
    raw = info.filename.encode("cp437")
    offset = 0
    while offset + 4 <= len(extra):
        tag, size = struct.unpack_from("<HH", extra, offset)
        body = extra[offset + 4 : offset + 4 + size]
        # Info-ZIP Unicode Path: version, CRC-32 of the raw name, UTF-8 name.
        if tag == _ZIP_UNICODE_PATH_EXTRA and len(body) > 5 and body[0] == 1:
            (crc,) = struct.unpack_from("<L", body, 1)
            if crc == zlib.crc32(raw):
                try:
                    return body[5:].decode("utf-8")
                except UnicodeDecodeError:
                    break
        offset += 4 + size
    return decode_name(raw)


class ZipSource(Source):
    """Entries of a zip file, decompressed in memory under the limits."""

    def __init__(self, location: Path, limits: Limits) -> None:
        super().__init__(location, limits)
        try:
            self._zip = zipfile.ZipFile(location)
        except _ZIP_ERRORS as exc:
            raise ImportFailed(f"{location}: not a readable zip file: {exc}") from None
        self._fp = open(location, "rb")  # noqa: SIM115 - closed in close()
        try:
            self._scan()
        except BaseException:
            self.close()
            raise

    def _scan(self) -> None:
        compressed = 0
        for info in self._zip.infolist():
            name = _zip_name(info)
            # Unix permission bits; many writers leave the file-type bits at 0.
            mode = info.external_attr >> 16
            if info.create_system == _ZIP_UNIX and stat.S_IFMT(mode):
                if stat.S_ISLNK(mode):
                    raise UnsafeEntry(f"{name!r}: symbolic link refused")
                if stat.S_ISDIR(mode):
                    continue
                if not stat.S_ISREG(mode):
                    raise UnsafeEntry(f"{name!r}: special file (device, fifo or socket) refused")
            if info.is_dir():
                safe_name(name)
                continue
            if info.flag_bits & _ZIP_ENCRYPTED_FLAG:
                raise ImportFailed(f"{name!r}: encrypted entries are not supported")
            self.limits.check_ratio(name, info.file_size, info.compress_size)
            compressed += info.compress_size
            self._add(name, info.file_size, info)
        self._check_declared(compressed)

    def chunks(self, entry: Entry) -> Iterator[bytes]:
        info = entry.ref
        assert isinstance(info, zipfile.ZipInfo)
        if info.compress_type in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            yield from self._read_raw(entry, info)
            return
        try:
            with self._zip.open(info) as fp:
                yield from _read_counted(self, entry, fp, info.file_size)
        except _ZIP_ERRORS as exc:
            raise ImportFailed(f"{entry.path!r}: damaged entry: {exc}") from None

    def _read_raw(self, entry: Entry, info: zipfile.ZipInfo) -> Iterator[bytes]:
        """Inflate ENTRY ourselves so real bytes are counted, not trusted."""
        self._fp.seek(info.header_offset)
        header = self._fp.read(_LOCAL_HEADER.size)
        if len(header) != _LOCAL_HEADER.size or header[:4] != b"PK\x03\x04":
            raise ImportFailed(f"{entry.path!r}: bad local header")
        fields = _LOCAL_HEADER.unpack(header)
        self._fp.seek(fields[-2] + fields[-1], os.SEEK_CUR)
        declared = info.file_size
        raw_left = info.compress_size
        inflater = zlib.decompressobj(-15) if info.compress_type == zipfile.ZIP_DEFLATED else None
        produced = 0
        crc = 0
        while True:
            if inflater is not None and inflater.unconsumed_tail:
                piece = inflater.decompress(inflater.unconsumed_tail, _CHUNK)
            elif raw_left > 0:
                raw = self._fp.read(min(_CHUNK, raw_left))
                if not raw:
                    raise ImportFailed(
                        f"{self.location}: damaged archive: it ends inside {entry.path!r} (truncated upload?)"
                    )
                raw_left -= len(raw)
                piece = raw if inflater is None else inflater.decompress(raw, _CHUNK)
            elif inflater is not None and not inflater.eof:
                piece = inflater.flush()
                if not piece:
                    raise ImportFailed(f"{entry.path!r}: truncated compressed data")
            else:
                break
            produced += len(piece)
            if produced > declared:
                raise UnsafeEntry(
                    f"{entry.path!r}: expands beyond its declared size of {declared} bytes "
                    "(lying header, possible zip bomb)"
                )
            self.limits.check_ratio(entry.path, produced, info.compress_size)
            self._count(entry, len(piece))
            crc = zlib.crc32(piece, crc)
            # the local file offset is shared: keep it where this entry's data goes on
            position = self._fp.tell()
            yield piece
            self._fp.seek(position)
            if inflater is not None and inflater.eof:
                break
        if produced != declared:
            raise ImportFailed(f"{entry.path!r}: {produced} bytes where {declared} were declared")
        if crc != info.CRC:
            raise ImportFailed(f"{entry.path!r}: CRC-32 mismatch (damaged archive)")

    def close(self) -> None:
        self._zip.close()
        self._fp.close()


class _Counted:
    """A raw file that counts the compressed bytes read from it."""

    def __init__(self, fp: BinaryIO) -> None:
        self._fp = fp
        self.consumed = 0

    def read(self, size: int = -1) -> bytes:
        data = self._fp.read(size)
        self.consumed += len(data)
        return data


class TarSource(Source):
    """Members of a tar, tar.gz, tar.bz2 or tar.xz file.

    A compressed tar is inflated once, into an unlinked temporary file, with its size and
    ratio checked after every megabyte; the members are then read from the plain tar.
    """

    def __init__(self, location: Path, limits: Limits, decompressor: type | None = None) -> None:
        super().__init__(location, limits)
        self._plain: IO[bytes] | None = None
        try:
            if decompressor is None:
                self._tar = tarfile.open(location, "r:")  # noqa: SIM115 - closed in close()
            else:
                self._plain = self._inflate(decompressor)
                self._tar = tarfile.open(fileobj=self._plain, mode="r:")  # noqa: SIM115 - closed in close()
        except _TAR_ERRORS as exc:
            self.close()
            raise ImportFailed(f"{location}: not a readable tar file: {exc}") from None
        except BaseException:
            self.close()
            raise
        try:
            self._scan()
        except _TAR_ERRORS as exc:
            self.close()
            raise ImportFailed(f"{location}: damaged tar file: {exc}") from None
        except BaseException:
            self.close()
            raise

    def _inflate(self, decompressor: type) -> IO[bytes]:
        """Inflate the archive into a temporary file, stopping at the first limit crossed."""
        name = str(self.location)
        plain = _scratch_file(self.location)
        try:
            with open(self.location, "rb") as raw_file:
                raw = _Counted(raw_file)
                stream = (
                    decompressor(fileobj=raw)
                    if issubclass(decompressor, gzip.GzipFile)
                    else decompressor(raw)
                )
                produced = 0
                try:
                    while piece := stream.read(_INFLATE_CHUNK):
                        produced += len(piece)
                        self.limits.check_total(name, produced)
                        self.limits.check_ratio(name, produced, raw.consumed)
                        plain.write(piece)
                except EOFError:
                    raise ImportFailed(
                        f"{name}: damaged archive: the compressed data ends early (truncated upload?)"
                    ) from None
                except (OSError, ValueError, zlib.error, lzma.LZMAError) as exc:
                    raise ImportFailed(f"{name}: damaged archive: {exc}") from None
            plain.seek(0)
            return plain
        except BaseException:
            plain.close()
            raise

    def _scan(self) -> None:
        for member in self._tar:
            name = decode_name(member.name.encode("utf-8", "surrogateescape"))
            if member.issym():
                raise UnsafeEntry(f"{name!r}: symbolic link refused")
            if member.islnk():
                raise UnsafeEntry(f"{name!r}: hard link refused")
            if member.isdir():
                safe_name(name)
                continue
            if member.isdev():
                raise UnsafeEntry(f"{name!r}: special file (device or fifo) refused")
            if member.issparse() or not member.isreg():
                raise UnsafeEntry(f"{name!r}: unsupported tar member type {member.type!r}")
            self._add(name, member.size, member)
        self._check_declared(self.location.stat().st_size)

    def chunks(self, entry: Entry) -> Iterator[bytes]:
        member = entry.ref
        assert isinstance(member, tarfile.TarInfo)
        try:
            fp = self._tar.extractfile(member)
            assert fp is not None
            with fp:
                yield from _read_counted(self, entry, fp, member.size)
        except _TAR_ERRORS as exc:
            raise ImportFailed(f"{entry.path!r}: damaged tar member: {exc}") from None

    def close(self) -> None:
        tar = getattr(self, "_tar", None)
        if tar is not None:
            tar.close()
        if self._plain is not None:
            self._plain.close()


def _head(path: Path) -> bytes:
    with open(path, "rb") as file:
        return file.read(8)


def open_source(location: str | os.PathLike[str], limits: Limits | None = None) -> Source:
    """Open a folder, zip or tar as a checked Source that holds at least one file."""
    path = Path(location)
    limits = limits or Limits()
    if not path.exists():
        raise ImportFailed(f"{path}: no such file or folder")
    if path.is_dir():
        source: Source = FolderSource(path, limits)
    else:
        head = _head(path)
        compressed = next((cls for magic, cls in _TAR_COMPRESSED if head.startswith(magic)), None)
        if zipfile.is_zipfile(path):
            source = ZipSource(path, limits)
        elif head.startswith(b"PK\x03\x04"):
            raise ImportFailed(
                f"{path}: damaged zip archive: its central directory is missing (truncated upload?)"
            )
        elif compressed is not None:
            source = TarSource(path, limits, compressed)
        elif tarfile.is_tarfile(path):
            source = TarSource(path, limits)
        else:
            raise ImportFailed(f"{path}: not a folder, zip or tar archive")
    if not source.entries:
        source.close()
        if source.skipped_junk:
            raise ImportFailed(
                f"{path}: nothing to import: only OS metadata ({_JUNK_SHOWN}), which is skipped"
            )
        raise ImportFailed(f"{path}: nothing to import: it holds no files")
    return source
