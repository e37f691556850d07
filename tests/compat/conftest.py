"""A virtual environment with the original kpl-dataset 0.0.9 and kpl-helper 0.1.3 from PyPI.

It is created once and reused across sessions from a cache folder: $KPL_COMPAT_CACHE, else
~/.cache/kpl-lab/compat. The originals share our import names, so they live only there.
Without PyPI the comparison is skipped, except under CI (CI set), where it fails.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ORIGINALS = ["kpl-dataset==0.0.9", "kpl-helper==0.1.3", "protobuf<4"]  # 0.0.9 does not import with protobuf 4

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None


def _cache() -> Path:
    default = Path.home() / ".cache" / "kpl-lab" / "compat"
    return Path(os.environ.get("KPL_COMPAT_CACHE") or default)


@contextlib.contextmanager
def _locked(path: Path):
    """Let one process at a time build the environment (parallel sessions, xdist workers)."""
    with open(path, "w") as lock:
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _python(folder: Path) -> Path:
    return folder / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


@pytest.fixture(scope="session")
def original_python() -> Path:
    """Return the python of the environment holding the original packages, building it if needed."""
    version = f"py{sys.version_info.major}{sys.version_info.minor}"
    folder = _cache() / f"originals-{version}"
    ready = folder / "ready.txt"  # written last: a half-built environment is rebuilt
    wanted = "\n".join(ORIGINALS)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with _locked(folder.parent / f".originals-{version}.lock"):
        if not (ready.is_file() and ready.read_text() == wanted and _python(folder).is_file()):
            venv.EnvBuilder(clear=True, with_pip=True).create(folder)
            install = subprocess.run(
                [
                    str(_python(folder)),
                    "-m",
                    "pip",
                    "install",
                    "--disable-pip-version-check",
                    "-q",
                    *ORIGINALS,
                ],
                capture_output=True,
                text=True,
                timeout=900,
            )
            if install.returncode != 0:
                reason = f"cannot install the original packages from PyPI: {install.stderr.strip()[-800:]}"
                if os.environ.get("CI"):
                    pytest.fail(reason)
                pytest.skip(reason)
            ready.write_text(wanted)
    return _python(folder)
