"""Where a project's files live under the storage root, and atomic copies into it.

Layout: `<root>/projects/<project>/{datasets,models,algorithms}/<name>/<version>/` and
`<root>/projects/<project>/jobs/<job_id>/`. Copies go to a staging folder on the same
filesystem and become visible by one rename, so a failure leaves nothing half-copied.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import stat
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..api.catalog import NAME_PATTERN
from ..engine.runfolder import Refused, open_folder, open_in
from ..errors import BadRequest

NAME_RE = re.compile(NAME_PATTERN)
SKIPPED = {"__pycache__", ".git", ".ipynb_checkpoints"}
KINDS = ("datasets", "models", "algorithms", "jobs", "deployments")
_CHUNK = 1 << 20


def check_name(name: str, what: str = "name") -> str:
    """Return `name` if it is a safe single path component, else raise BadRequest."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise BadRequest(
            f"{what} {name!r} is not valid: use 1-100 ASCII letters, digits, '_', '-' or '.', "
            "starting with a letter, digit or '_'",
            field=what,
        )
    return name


@dataclass
class CopyResult:
    """What a hashed copy found: content hash, total bytes, relative file paths."""

    digest: str
    size_bytes: int
    files: list[str] = field(default_factory=list)

    @property
    def version(self) -> str:
        """Return the short content hash used as a version."""
        return self.digest[:12]


class Storage:
    """The storage root (a local folder for now) and the paths of everything in it."""

    def __init__(self, url: str | os.PathLike) -> None:
        text = os.fspath(url)
        if text.startswith("file://"):
            text = text[len("file://") :]
        elif "://" in text:
            raise BadRequest(f"storage_url {text!r}: only local folders are supported for now")
        self.root = Path(text).expanduser().resolve()

    def project_dir(self, project: str) -> Path:
        """Return the folder of one project."""
        return self.root / "projects" / check_name(project, "project")

    def kind_dir(self, project: str, kind: str) -> Path:
        """Return the folder of one kind of object (datasets, models, algorithms, jobs)."""
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r}")
        return self.project_dir(project) / kind

    def dataset_dir(self, project: str, name: str, version: str) -> Path:
        """Return the folder of one dataset version."""
        return self.kind_dir(project, "datasets") / check_name(name) / check_name(version, "version")

    def model_dir(self, project: str, name: str, version: str) -> Path:
        """Return the folder of one model version."""
        return self.kind_dir(project, "models") / check_name(name) / check_name(version, "version")

    def algorithm_dir(self, project: str, name: str, version: str) -> Path:
        """Return the folder of one algorithm version."""
        return self.kind_dir(project, "algorithms") / check_name(name) / check_name(version, "version")

    def job_dir(self, project: str, job_id: str) -> Path:
        """Return the run folder of one job."""
        return self.kind_dir(project, "jobs") / check_name(job_id, "job id")

    def relative(self, path: Path) -> str:
        """Return `path` relative to the root, as stored in the database."""
        return Path(path).resolve().relative_to(self.root).as_posix()

    def absolute(self, relative: str) -> Path:
        """Return the absolute path of a path stored in the database."""
        return self.root / relative

    @contextlib.contextmanager
    def staging(self, project: str) -> Iterator[Path]:
        """Yield an empty folder on the storage filesystem; it is removed unless published."""
        base = self.project_dir(project) / ".staging"
        base.mkdir(parents=True, exist_ok=True)
        tmp = base / uuid.uuid4().hex
        tmp.mkdir()
        try:
            yield tmp
        finally:
            if tmp.exists():
                remove_tree(tmp)

    def publish(self, staged: Path, final: Path) -> bool:
        """Move a staged folder to its final place in one rename; False if it already existed."""
        make_read_only(staged)
        with self._own_folder(final.parent) as folder:
            try:
                os.rename(staged, final.name, dst_dir_fd=folder)
            except OSError:
                with contextlib.suppress(FileNotFoundError):  # same content published before (or just now)
                    if stat.S_ISDIR(os.stat(final.name, dir_fd=folder, follow_symlinks=False).st_mode):
                        return False
                raise
        return True

    def remove(self, path: Path) -> None:
        """Delete a published folder: rename it away first so it vanishes at once."""
        with self._own_folder(path.parent, make=False) as folder:
            if folder is None:
                return
            trash = f".deleting-{uuid.uuid4().hex}"
            try:
                os.rename(path.name, trash, src_dir_fd=folder, dst_dir_fd=folder)
            except FileNotFoundError:
                return
            remove_tree(path.parent / trash)  # every folder up to it is the platform's: no link on the way

    @contextlib.contextmanager
    def _own_folder(self, path: Path, make: bool = True) -> Iterator[int | None]:
        """Yield a descriptor of a folder below the root, every folder on the way the platform's own and no link.

        Missing ones are made (`make`; else None when one is missing). Members of a project
        may add folders in its `datasets/`: one of theirs, or a link in its place, would
        have the platform's account (root) move or delete files wherever it leads.
        """
        relative = path.relative_to(self.root)
        try:
            fd = open_folder(self.root, relative, make=make, owner=os.geteuid())
        except Refused as error:
            raise BadRequest(
                f"{relative}: {error}; the platform writes only through folders it made: move it away, then try again"
            ) from None
        try:
            yield fd
        finally:
            if fd is not None:
                os.close(fd)


def copy_hashed(
    src: Path, dest: Path, skip: Callable[[str], bool] | None = None, within: Path | None = None
) -> CopyResult:
    """Copy a file or a folder's files into folder `dest`, hashing paths and bytes on the way.

    Entries whose name `skip` accepts are left out (with SKIPPED always). Symlinks and
    special files are refused: an upload is hostile until checked. Files are opened with no
    link followed below `within` (a job's run folder, which its user controls: a link she
    swaps in for her outputs while they are copied gets an error, not root's file in her
    model), else below the folder holding `src` (`runfolder.open_in`).
    """
    src = Path(src)
    base = Path(within) if within is not None else Path(os.path.realpath(src.parent))
    src = base / src.relative_to(within) if within is not None else base / src.name
    if src.is_symlink():
        raise BadRequest(f"{src}: symbolic links are not accepted")
    if src.is_file():
        entries = [(src.name, src)]
    elif src.is_dir():
        entries = sorted(_walk(src, src, skip or (lambda _name: False)), key=lambda e: e[0])
    else:
        raise BadRequest(f"{src}: no such file or folder")
    digest = hashlib.sha256()
    total = 0
    for rel, path in entries:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        digest.update(rel.encode() + b"\0")
        try:
            fd = open_in(base, path.relative_to(base))
        except Refused:
            raise BadRequest(f"{rel}: symbolic links and special files are not accepted") from None
        with open(fd, "rb") as fin, open(target, "wb") as fout:
            while chunk := fin.read(_CHUNK):
                digest.update(chunk)
                fout.write(chunk)
                total += len(chunk)
        digest.update(b"\0")
    return CopyResult(digest.hexdigest(), total, [rel for rel, _ in entries])


def link_files(src: Path, dest: Path, skip: Callable[[str], bool] | None = None) -> list[tuple[str, Path]]:
    """Hard-link a folder's files into folder `dest` (copied where the filesystem refuses a link).

    For folders the platform wrote itself (a pipeline node's output): no byte is read or
    written, and the two names share the file. A file another account owns (a sandboxed
    worker's) is copied: its owner could change a shared file's bytes later. Entries `skip`
    accepts are left out; symbolic links and special files are refused, also one swapped in
    while it is linked. Return each file's path relative to `src` and its new name.
    """
    linked = []
    mine = os.geteuid()
    for rel, path in sorted(_walk(src, src, skip or (lambda _name: False)), key=lambda e: e[0]):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            if os.lstat(path).st_uid != mine:
                raise PermissionError(path)
            os.link(path, target, follow_symlinks=False)
        except OSError:  # another owner, another filesystem, or links refused: a copy
            shutil.copyfile(path, target, follow_symlinks=False)
        if not stat.S_ISREG(os.lstat(target).st_mode):
            os.unlink(target)
            raise BadRequest(f"{rel}: symbolic links and special files are not accepted")
        linked.append((rel, target))
    return linked


def _walk(root: Path, folder: Path, skip: Callable[[str], bool]) -> Iterator[tuple[str, Path]]:
    with os.scandir(folder) as scan:
        entries = list(scan)
    for entry in entries:
        path = Path(entry.path)
        rel = path.relative_to(root).as_posix()
        if entry.name in SKIPPED or skip(entry.name):
            continue
        if entry.is_symlink():
            raise BadRequest(f"{rel}: symbolic links are not accepted")
        if entry.is_dir():
            yield from _walk(root, path, skip)
        elif entry.is_file():
            yield rel, path
        else:
            raise BadRequest(f"{rel}: not a regular file")


def make_read_only(path: Path) -> None:
    """Remove write permission from every file under `path` (versions are immutable)."""
    for folder, _, files in os.walk(path):
        for name in files:
            file = os.path.join(folder, name)
            os.chmod(file, stat.S_IMODE(os.lstat(file).st_mode) & ~0o222)


def remove_tree(path: Path) -> None:
    """Delete a folder (read-only files go too: their folders stay writable)."""
    shutil.rmtree(path)
