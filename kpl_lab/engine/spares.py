"""Run folders made ahead of their jobs: a start fills a spare one and renames it into place.

Creating a file or a folder is a journalled metadata operation (tenths of a millisecond
on ext4, several on a busy disk), and a run folder starts with eight entries. The local
executor keeps one spare folder per jobs folder, made right after a job started (off the
next start's path): `.spare-<pid>-<n>` with `inputs/`, `outputs/` and the empty logs and
lock. A start writes the job's files into it, no longer visible to anyone, and renames
it to the run folder, which so appears whole: its files need no temporary name each.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import threading
from pathlib import Path

PREFIX = ".spare-"
FOLDERS = ("inputs", "outputs")
# the supervisor's log and lock are the supervisor's (root's where jobs run as their users)
SUPERVISOR_FILES = ("supervisor.log", "supervisor.lock")
FILES = ("output.log", "events.jsonl", *SUPERVISOR_FILES)


class Spares:
    """One spare run folder per jobs folder, for this process (a forked copy makes its own)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ready: dict[tuple[int, Path], Path] = {}
        self._swept: set[tuple[int, Path]] = set()
        self._count = itertools.count()

    def take(self, parent: Path) -> Path | None:
        """Return a spare folder in `parent`, now the caller's alone, or None when none is ready."""
        with self._lock:
            return self._ready.pop((os.getpid(), parent), None)

    def make(self, parent: Path) -> None:
        """Make the spare folder of `parent` if it has none (a failure only leaves it without one)."""
        key = (os.getpid(), parent)
        with self._lock:
            if key in self._ready:
                return
            sweep = key not in self._swept
            self._swept.add(key)
            folder = parent / f"{PREFIX}{os.getpid()}-{next(self._count)}"
        if sweep:
            _remove_stale(parent)
        try:
            folder.mkdir(parents=True)
            for name in FOLDERS:
                (folder / name).mkdir()
            for name in FILES:
                (folder / name).touch()
        except OSError:
            shutil.rmtree(folder, ignore_errors=True)
            return
        with self._lock:
            if key in self._ready:  # another thread made one meanwhile
                shutil.rmtree(folder, ignore_errors=True)
            else:
                self._ready[key] = folder


def _remove_stale(parent: Path) -> None:
    """Remove the spare folders of processes that ended (a server killed before using them)."""
    with contextlib.suppress(OSError):
        for entry in parent.iterdir():
            if not entry.name.startswith(PREFIX):
                continue
            pid = entry.name[len(PREFIX) :].partition("-")[0]
            if pid.isdigit() and not _running(int(pid)):
                shutil.rmtree(entry, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's: running
        pass
    return True
