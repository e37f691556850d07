"""Load an algorithm from a folder or an archive, hash it, and store it as an immutable version."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import tarfile
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..api.catalog import NAME_PATTERN
from .errors import AlgorithmError, ArchiveError, Problem
from .parameters import PARAMETER_FILE, Parameters, load_parameters
from .spec import ENVIRONMENT_FILE, EnvironmentSpec, load_environment

IGNORED = frozenset({"__pycache__", ".git", ".ipynb_checkpoints"})
_NOT_ROOT = frozenset({"__MACOSX"})  # folders archivers add beside the real top folder
ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
NAME_RE = re.compile(NAME_PATTERN)  # the catalog's names: an algorithm's name is one
_CHUNK = 1 << 20


@dataclass(frozen=True)
class ArchiveLimits:
    """Bounds an archive must respect to be extracted (against zip bombs and junk uploads)."""

    max_total_bytes: int = 512 * 1024 * 1024
    max_files: int = 20_000
    max_ratio: float = 100.0  # uncompressed / compressed size
    ratio_floor_bytes: int = 1024 * 1024  # below this size, any ratio is fine (text compresses well)


@dataclass(frozen=True)
class Algorithm:
    """A validated algorithm folder: its name, content version, environment and parameters."""

    name: str
    version: str  # the first 12 hex digits of `digest`
    digest: str  # sha256 over sorted relative paths and bytes
    spec: EnvironmentSpec
    parameters: Parameters
    path: Path
    size_bytes: int

    @property
    def ref(self) -> str:
        """Return `NAME:VERSION`."""
        return f"{self.name}:{self.version}"


def is_archive(path: str | Path) -> bool:
    """Say whether `path` names an archive this module can extract."""
    return Path(path).name.lower().endswith(ARCHIVE_SUFFIXES)


def archive_stem(path: str | Path) -> str:
    """Return the file name without its archive suffix."""
    name = Path(path).name
    for suffix in sorted(ARCHIVE_SUFFIXES, key=len, reverse=True):
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return Path(name).stem


def iter_files(folder: Path) -> Iterator[tuple[str, Path]]:
    """Yield (relative posix path, path) of every file, sorted, skipping ignored folders.

    Symbolic links and special files are refused: an upload is hostile until checked.
    """
    folder = Path(folder)
    entries: list[tuple[str, Path]] = []
    stack = [folder]
    while stack:
        current = stack.pop()
        with os.scandir(current) as scan:
            listing = list(scan)
        for entry in listing:
            path = Path(entry.path)
            rel = path.relative_to(folder).as_posix()
            if entry.name in IGNORED:
                continue
            if entry.is_symlink():
                raise ArchiveError(Problem(rel, "symbolic links are not accepted in an algorithm"))
            if entry.is_dir():
                stack.append(path)
            elif entry.is_file():
                entries.append((rel, path))
            else:
                raise ArchiveError(
                    Problem(rel, "not a regular file (devices, sockets and pipes are refused)")
                )
    yield from sorted(entries)


def content_hash(folder: str | Path) -> tuple[str, int]:
    """Return (sha256 hex digest, total bytes) over sorted relative paths and file bytes."""
    digest = hashlib.sha256()
    total = 0
    for rel, path in iter_files(Path(folder)):
        digest.update(rel.encode("utf-8", "surrogateescape") + b"\0")
        with open(path, "rb") as file:
            while chunk := file.read(_CHUNK):
                digest.update(chunk)
                total += len(chunk)
        digest.update(b"\0")
    return digest.hexdigest(), total


def find_root(folder: Path) -> Path:
    """Return the folder holding environment.yml: `folder` or its single top-level folder."""
    folder = Path(folder)
    if (folder / ENVIRONMENT_FILE).is_file():
        return folder
    entries = [entry for entry in folder.iterdir() if entry.name not in IGNORED | _NOT_ROOT]
    if len(entries) == 1 and not entries[0].is_symlink() and (entries[0] / ENVIRONMENT_FILE).is_file():
        return entries[0]
    found = ", ".join(sorted(entry.name for entry in entries)[:10]) or "nothing"
    raise AlgorithmError(
        Problem("", f"no {ENVIRONMENT_FILE} at the top of the algorithm (found: {found})", ENVIRONMENT_FILE)
    )


def read_algorithm(folder: str | Path, name: str | None = None) -> Algorithm:
    """Validate an algorithm folder in place; raise AlgorithmError listing every problem."""
    root = find_root(Path(folder))
    name = check_algorithm_name(name or root.name)
    problems: list[Problem] = []
    spec = parameters = None
    try:
        spec = load_environment(root / ENVIRONMENT_FILE)
    except AlgorithmError as exc:
        problems += exc.problems
    parameters = Parameters()
    if (root / PARAMETER_FILE).is_file():
        try:
            parameters = load_parameters(root / PARAMETER_FILE)
        except AlgorithmError as exc:
            problems += exc.problems
    if problems:
        raise AlgorithmError(problems)
    assert spec is not None
    digest, size = content_hash(root)
    return Algorithm(
        name=name,
        version=digest[:12],
        digest=digest,
        spec=spec,
        parameters=parameters,
        path=root,
        size_bytes=size,
    )


def check_algorithm_name(name: str) -> str:
    """Return `name` if it can name an algorithm (and a folder), else raise AlgorithmError."""
    if not NAME_RE.fullmatch(name) or name in {".", ".."}:
        raise AlgorithmError(
            Problem(
                "name",
                f"{name!r} is not a valid algorithm name: use 1-100 ASCII letters, digits, '_', '-' or '.'",
            )
        )
    return name


def install_algorithm(source: str | Path, versions_root: str | Path, name: str | None = None) -> Algorithm:
    """Copy a folder or an archive into `versions_root/<name>/<version>` as an immutable version.

    The copy is staged beside the destination, validated and hashed there (so the version
    is the hash of exactly the stored bytes), made read-only and published by one rename.
    Installing the same content twice returns the existing version.
    """
    source = Path(source)
    versions_root = Path(versions_root)
    if not source.exists():
        raise AlgorithmError(Problem("", f"{source}: no such file or folder"))
    staging_root = versions_root / ".staging"
    staging_root.mkdir(parents=True, exist_ok=True)
    staged = staging_root / uuid.uuid4().hex
    try:
        if source.is_dir():
            root = find_root(source)
            default_name = root.name
            _copy_folder(root, staged)
        elif is_archive(source):
            default_name = archive_stem(source)
            extract_archive(source, staged)
        else:
            raise AlgorithmError(
                Problem("", f"{source.name}: expected a folder or an archive ({', '.join(ARCHIVE_SUFFIXES)})")
            )
        root = find_root(staged)
        if root != staged:
            default_name = root.name
        _remove_ignored(root)
        staged_algorithm = read_algorithm(root, name or default_name)
        final = versions_root / staged_algorithm.name / staged_algorithm.version
        if not final.is_dir():
            _make_read_only(root)
            final.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.rename(root, final)
            except OSError:
                if not final.is_dir():  # else: the same content was published concurrently
                    raise
        return read_algorithm(final, staged_algorithm.name)
    finally:
        if staged.exists():
            shutil.rmtree(staged)


def remove_version(path: str | Path) -> None:
    """Delete a stored algorithm version: renamed away first so it vanishes at once."""
    path = Path(path)
    if not path.exists():
        return
    trash = path.parent / f".deleting-{uuid.uuid4().hex}"
    os.rename(path, trash)
    shutil.rmtree(trash)


def extract_archive(archive: str | Path, dest: str | Path, limits: ArchiveLimits | None = None) -> None:
    """Extract a zip or tar archive into the new folder `dest`, refusing anything unsafe."""
    archive, dest = Path(archive), Path(dest)
    limits = limits or ArchiveLimits()
    dest.mkdir(parents=True)
    try:
        if zipfile.is_zipfile(archive):
            _extract_zip(archive, dest, limits)
        elif tarfile.is_tarfile(archive):
            _extract_tar(archive, dest, limits)
        else:
            raise ArchiveError(Problem("", f"{archive.name}: not a zip or tar archive"))
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError) as exc:
        raise ArchiveError(Problem("", f"{archive.name}: cannot read the archive: {exc}")) from exc


def _size(count: int) -> str:
    return f"{count / (1024 * 1024):g} MB" if count >= 1024 * 1024 else f"{count} bytes"


def _safe_name(raw: str) -> PurePosixPath:
    """Return the relative path of an archive entry, or raise naming the entry."""
    if "\0" in raw:
        raise ArchiveError(Problem(repr(raw), "entry name contains a NUL byte"))
    name = raw.replace("\\", "/")
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        raise ArchiveError(Problem(raw, "absolute paths are not accepted in an archive"))
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ArchiveError(Problem(raw, "'..' in a path would write outside the algorithm folder"))
    return PurePosixPath(*parts) if parts else PurePosixPath(".")


class _Budget:
    """Count what extraction really writes, whatever the archive headers claim."""

    def __init__(self, limits: ArchiveLimits, compressed_size: int):
        self.limits = limits
        self.compressed_size = max(compressed_size, 1)
        self.files = 0
        self.total = 0

    def add_file(self, entry: str) -> None:
        self.files += 1
        if self.files > self.limits.max_files:
            raise ArchiveError(Problem(entry, f"more than {self.limits.max_files} files in the archive"))

    def add_bytes(self, entry: str, count: int) -> None:
        self.total += count
        if self.total > self.limits.max_total_bytes:
            raise ArchiveError(
                Problem(entry, f"the archive expands beyond {_size(self.limits.max_total_bytes)}")
            )
        if (
            self.total > self.limits.ratio_floor_bytes
            and self.total / self.compressed_size > self.limits.max_ratio
        ):
            raise ArchiveError(
                Problem(
                    entry,
                    f"the archive expands more than {self.limits.max_ratio:g} times its size (zip bomb?)",
                )
            )


def _write_entry(stream, target: Path, entry: str, budget: _Budget, mode: int, declared: int | None) -> None:
    if target.exists():
        raise ArchiveError(Problem(entry, "duplicate entry in the archive"))
    target.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with open(target, "xb") as out:
        while chunk := stream.read(_CHUNK):
            written += len(chunk)
            if declared is not None and written > declared:
                raise ArchiveError(Problem(entry, "entry is larger than its header says"))
            budget.add_bytes(entry, len(chunk))
            out.write(chunk)
    os.chmod(target, 0o755 if mode & 0o111 else 0o644)


def _extract_zip(archive: Path, dest: Path, limits: ArchiveLimits) -> None:
    budget = _Budget(limits, archive.stat().st_size)
    with zipfile.ZipFile(archive) as zf:
        infos = zf.infolist()
        for info in infos:  # check every header before writing anything
            rel = _safe_name(info.filename)
            mode = info.external_attr >> 16
            kind = stat.S_IFMT(mode)
            if info.flag_bits & 0x1:
                raise ArchiveError(Problem(info.filename, "encrypted entries are not accepted"))
            if kind == stat.S_IFLNK:
                raise ArchiveError(Problem(info.filename, "symbolic links are not accepted in an archive"))
            if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
                raise ArchiveError(Problem(info.filename, "device and special files are not accepted"))
            if (
                not info.is_dir()
                and info.file_size > limits.ratio_floor_bytes
                and info.file_size / max(info.compress_size, 1) > limits.max_ratio
            ):
                raise ArchiveError(
                    Problem(
                        info.filename,
                        f"entry expands more than {limits.max_ratio:g} times its size (zip bomb?)",
                    )
                )
            if str(rel) == "." and not info.is_dir():
                raise ArchiveError(Problem(info.filename, "entry has no file name"))
        if sum(info.file_size for info in infos) > limits.max_total_bytes:
            raise ArchiveError(Problem("", f"the archive expands beyond {_size(limits.max_total_bytes)}"))
        for info in infos:
            rel = _safe_name(info.filename)
            if info.is_dir():
                (dest / rel).mkdir(parents=True, exist_ok=True)
                continue
            budget.add_file(info.filename)
            with zf.open(info) as stream:
                _write_entry(
                    stream, dest / rel, info.filename, budget, info.external_attr >> 16, info.file_size
                )


def _extract_tar(archive: Path, dest: Path, limits: ArchiveLimits) -> None:
    budget = _Budget(limits, archive.stat().st_size)
    with tarfile.open(archive, "r:*") as tf:
        for member in tf:  # streamed: a tar has no index, headers are checked one by one
            rel = _safe_name(member.name)
            if member.issym() or member.islnk():
                raise ArchiveError(Problem(member.name, "links are not accepted in an archive"))
            if member.isdir():
                (dest / rel).mkdir(parents=True, exist_ok=True)
                continue
            if not member.isfile():
                raise ArchiveError(Problem(member.name, "device and special files are not accepted"))
            if str(rel) == ".":
                raise ArchiveError(Problem(member.name, "entry has no file name"))
            budget.add_file(member.name)
            stream = tf.extractfile(member)
            assert stream is not None
            with stream:
                _write_entry(stream, dest / rel, member.name, budget, member.mode, member.size)


def _copy_folder(source: Path, dest: Path) -> None:
    for rel, path in iter_files(source):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        os.chmod(target, 0o755 if path.stat().st_mode & 0o111 else 0o644)
    dest.mkdir(parents=True, exist_ok=True)


def _remove_ignored(folder: Path) -> None:
    for current, dirs, _ in os.walk(folder):
        for name in [d for d in dirs if d in IGNORED]:
            shutil.rmtree(os.path.join(current, name))
            dirs.remove(name)


def _make_read_only(folder: Path) -> None:
    for current, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(current, name)
            os.chmod(path, stat.S_IMODE(os.lstat(path).st_mode) & ~0o222)
