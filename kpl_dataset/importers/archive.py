"""Read files out of a folder, zip or tar without extracting them to disk."""

from __future__ import annotations

import lzma
import os
import stat
import struct
import tarfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from kpl_dataset.importers.safety import ImportFailed, Limits, UnsafeEntry, decode_name, is_junk, safe_name

_CHUNK = 1 << 16
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

    def read(self, entry: Entry) -> bytes:
        """Return the content of ENTRY, counting the real bytes."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the underlying file."""

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read_counted(source: Source, entry: Entry, fp: BinaryIO, declared: int) -> bytes:
    """Read FP to its end, refusing more than DECLARED bytes."""
    chunks = []
    produced = 0
    while True:
        piece = fp.read(_CHUNK)
        if not piece:
            break
        produced += len(piece)
        if produced > declared:
            raise UnsafeEntry(f"{entry.path!r}: holds more bytes than its declared {declared}")
        source._count(entry, len(piece))
        chunks.append(piece)
    if produced != declared:
        raise ImportFailed(f"{entry.path!r}: truncated: {produced} of {declared} bytes")
    return b"".join(chunks)


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

    def read(self, entry: Entry) -> bytes:
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(str(entry.ref), flags)
        except OSError as exc:
            raise ImportFailed(f"{entry.path!r}: cannot open: {exc.strerror}") from None
        with os.fdopen(fd, "rb") as fp:
            if not stat.S_ISREG(os.fstat(fp.fileno()).st_mode):
                raise UnsafeEntry(f"{entry.path!r}: no longer a regular file")
            return _read_counted(self, entry, fp, entry.size)


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

    def read(self, entry: Entry) -> bytes:
        info = entry.ref
        assert isinstance(info, zipfile.ZipInfo)
        if info.compress_type in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            return self._read_raw(entry, info)
        try:
            with self._zip.open(info) as fp:
                return _read_counted(self, entry, fp, info.file_size)
        except _ZIP_ERRORS as exc:
            raise ImportFailed(f"{entry.path!r}: damaged entry: {exc}") from None

    def _read_raw(self, entry: Entry, info: zipfile.ZipInfo) -> bytes:
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
        chunks: list[bytes] = []
        produced = 0
        crc = 0
        while True:
            if inflater is not None and inflater.unconsumed_tail:
                piece = inflater.decompress(inflater.unconsumed_tail, _CHUNK)
            elif raw_left > 0:
                raw = self._fp.read(min(_CHUNK, raw_left))
                if not raw:
                    raise ImportFailed(f"{entry.path!r}: truncated archive")
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
            chunks.append(piece)
            if inflater is not None and inflater.eof:
                break
        if produced != declared:
            raise ImportFailed(f"{entry.path!r}: {produced} bytes where {declared} were declared")
        if crc != info.CRC:
            raise ImportFailed(f"{entry.path!r}: CRC-32 mismatch (damaged archive)")
        return b"".join(chunks)

    def close(self) -> None:
        self._zip.close()
        self._fp.close()


class TarSource(Source):
    """Members of a tar, tar.gz, tar.bz2 or tar.xz file."""

    def __init__(self, location: Path, limits: Limits) -> None:
        super().__init__(location, limits)
        try:
            self._tar = tarfile.open(location, "r:*")  # noqa: SIM115 - closed in close()
        except _TAR_ERRORS as exc:
            raise ImportFailed(f"{location}: not a readable tar file: {exc}") from None
        try:
            self._scan()
        except _TAR_ERRORS as exc:
            self.close()
            raise ImportFailed(f"{location}: damaged tar file: {exc}") from None
        except BaseException:
            self.close()
            raise
        self._archive_size = location.stat().st_size

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

    def read(self, entry: Entry) -> bytes:
        member = entry.ref
        assert isinstance(member, tarfile.TarInfo)
        try:
            fp = self._tar.extractfile(member)
            assert fp is not None
            with fp:
                data = _read_counted(self, entry, fp, member.size)
        except _TAR_ERRORS as exc:
            raise ImportFailed(f"{entry.path!r}: damaged tar member: {exc}") from None
        self.limits.check_ratio(entry.path, self._read_total, self._archive_size)
        return data

    def close(self) -> None:
        self._tar.close()


def open_source(location: str | os.PathLike[str], limits: Limits | None = None) -> Source:
    """Open a folder, zip or tar as a checked Source."""
    path = Path(location)
    limits = limits or Limits()
    if not path.exists():
        raise ImportFailed(f"{path}: no such file or folder")
    if path.is_dir():
        return FolderSource(path, limits)
    if zipfile.is_zipfile(path):
        return ZipSource(path, limits)
    if tarfile.is_tarfile(path):
        return TarSource(path, limits)
    raise ImportFailed(f"{path}: not a folder, zip or tar archive")
