"""Python environments the tests build once per machine and reuse: the users' Python and the original kpl packages.

Each is built under a file lock, so pytest's workers and test runs side by side build it
once. `.ci/run` builds both in the background while its lint steps run
(`python -m kpl_lab.testing.environments`), so that pytest finds them ready.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import time
import venv
from collections.abc import Iterator
from pathlib import Path

from ..hub import userenv

USER_ENV_VARIABLE = "KPL_TEST_USER_ENV"
USER_ENV_DEFAULT = "/tmp/kpl-test-user-env"
COMPAT_VARIABLE = "KPL_COMPAT_CACHE"
# the last PyPI releases of the packages kpl_dataset and kpl_helper replace; 0.0.9 does not import with protobuf 4
ORIGINALS = ["kpl-dataset==0.0.9", "kpl-helper==0.1.3", "protobuf<4"]
PIP_SECONDS = 900


class Unavailable(Exception):
    """The environment cannot be built on this machine; the message says why."""


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Let one process at a time build what `path` (a lock file) guards."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def user_python() -> Path:
    """Return the users' Python (`kpl-lab up`'s user-env) in $KPL_TEST_USER_ENV, building it if needed.

    Raise Unavailable unless this runs as root with a Python other accounts can run.
    """
    if os.geteuid() != 0 or not userenv.reachable_by_others(userenv.DEFAULT_PYTHON):
        raise Unavailable(f"needs root and {userenv.DEFAULT_PYTHON}")
    folder = Path(os.environ.get(USER_ENV_VARIABLE, USER_ENV_DEFAULT))
    with _locked(Path(f"{folder}.lock")):
        return userenv.build(folder)


def original_python() -> Path:
    """Return the python of a virtual environment holding the original packages (ORIGINALS), building it if needed.

    It lives in $KPL_COMPAT_CACHE (default ~/.cache/kpl-lab/compat); raise Unavailable when
    pip cannot install them (no PyPI).
    """
    cache = Path(os.environ.get(COMPAT_VARIABLE) or Path.home() / ".cache" / "kpl-lab" / "compat")
    version = f"py{sys.version_info.major}{sys.version_info.minor}"
    folder = cache / f"originals-{version}"
    python = userenv.python_of(folder)
    ready = folder / "ready.txt"  # written last: a half-built environment is built again
    wanted = "\n".join(ORIGINALS)
    with _locked(cache / f".originals-{version}.lock"):
        if not (ready.is_file() and ready.read_text() == wanted and python.is_file()):
            venv.EnvBuilder(clear=True, with_pip=True).create(folder)
            install = subprocess.run(
                [
                    str(python),
                    "-m",
                    "pip",
                    "install",
                    "--disable-pip-version-check",
                    "-q",
                    *ORIGINALS,
                ],
                capture_output=True,
                text=True,
                timeout=PIP_SECONDS,
            )
            if install.returncode != 0:
                raise Unavailable(
                    f"cannot install the original packages from PyPI: {install.stderr.strip()[-800:]}"
                )
            ready.write_text(wanted)
    return python


def main() -> int:
    """Build both environments; print each one's python (or why not) and how long it took."""
    failed = False
    for build in (user_python, original_python):
        start = time.monotonic()
        try:
            found = build()
        except Unavailable as error:  # the fixture skips or fails with the same reason
            print(f"{build.__name__}: not built: {error}", flush=True)
            continue
        except Exception as error:  # the fixture builds again and reports it in the test
            print(f"{build.__name__}: failed: {error!r}", flush=True)
            failed = True
            continue
        print(f"{build.__name__}: {found} ({time.monotonic() - start:.0f} s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
