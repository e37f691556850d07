"""Checks that keep hostile uploads from escaping or exhausting the importer."""

from __future__ import annotations

import re
from dataclasses import dataclass

from kpl_dataset import KPLDatasetError

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

_DRIVE = re.compile(r"^[A-Za-z]:")
# Archivers add these; they are never part of the user's data.
_JUNK_PARTS = {"__MACOSX"}
_JUNK_NAMES = {".DS_Store", "Thumbs.db", "desktop.ini"}


class ImportFailed(KPLDatasetError):
    """An import could not finish; the message says what and where."""


class UnsafeEntry(ImportFailed):
    """An archive or folder entry that must not be imported."""


@dataclass(frozen=True)
class Limits:
    """Bounds on what one import may unpack."""

    max_total_size: int = 16 * GiB
    max_file_size: int = 4 * GiB
    max_ratio: float = 200.0
    # Small files compress absurdly well (a blank page): ratios below this size are harmless.
    ratio_floor: int = 1 * MiB
    max_entries: int = 1_000_000

    def check_ratio(self, name: str, uncompressed: int, compressed: int) -> None:
        """Refuse an entry whose size is out of proportion to its compressed size."""
        if uncompressed <= self.ratio_floor:
            return
        ratio = uncompressed / max(compressed, 1)
        if ratio > self.max_ratio:
            raise UnsafeEntry(
                f"{name!r}: compression ratio {ratio:.0f}:1 exceeds the limit of {self.max_ratio:.0f}:1 "
                "(possible zip bomb)"
            )

    def check_file_size(self, name: str, size: int) -> None:
        """Refuse an entry larger than one file may be."""
        if size > self.max_file_size:
            raise UnsafeEntry(
                f"{name!r}: {size} bytes exceeds the per-file limit of {self.max_file_size} bytes"
            )

    def check_total(self, name: str, total: int) -> None:
        """Refuse once the bytes unpacked so far pass the total limit."""
        if total > self.max_total_size:
            raise UnsafeEntry(
                f"{name!r}: total uncompressed size {total} bytes exceeds the limit of "
                f"{self.max_total_size} bytes (possible zip bomb)"
            )


def decode_name(raw: bytes) -> str:
    """Decode a file name from an archive or disk that carries no reliable encoding."""
    for encoding in ("utf-8", "gbk"):
        try:
            return raw.decode(encoding)
        except UnicodeDecodeError:
            continue
    return raw.decode("cp437")


def safe_name(name: str) -> str:
    """Return NAME as a clean relative POSIX path, or refuse it."""
    if "\x00" in name:
        raise UnsafeEntry(f"{name!r}: NUL character in entry name")
    unified = name.replace("\\", "/")
    if unified.startswith("/"):
        raise UnsafeEntry(f"{name!r}: absolute path refused")
    if _DRIVE.match(unified):
        raise UnsafeEntry(f"{name!r}: drive letter refused")
    parts = [p for p in unified.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafeEntry(f"{name!r}: '..' in path refused (path traversal)")
    if not parts:
        raise UnsafeEntry(f"{name!r}: empty entry name")
    return "/".join(parts)


def is_junk(path: str) -> bool:
    """Tell whether PATH is archiver litter (macOS resource forks, thumbnails)."""
    parts = path.split("/")
    return bool(_JUNK_PARTS.intersection(parts)) or parts[-1] in _JUNK_NAMES or parts[-1].startswith("._")
