"""The Python environment users' notebooks and jobs run from: executable by every account.

Users' servers and jobs run as the users' own OS accounts, so their Python must be one
that other accounts can execute. When the platform's own Python is (installed under
/usr or /opt), it is used as it is. Otherwise (a Python under /root, mode 700) a virtual
environment is built once at `<home>/user-env` on a Python they can execute (Debian's
/usr/bin/python3 by default), with the platform's requirements
as kpl-lab declares them, and this very kpl_lab: a `.pth` line to its source folder when other
accounts can read it (an editable install), else a copy of the packages. A stamp file
records what it was built from; the next `kpl-lab up` reuses it while that is unchanged.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from packaging.requirements import Requirement

DISTRIBUTION = "kpl-lab"
PACKAGES = ("kpl_lab", "kpl_dataset", "kpl_helper")
SOURCE = Path(__file__).resolve().parents[2]  # the folder holding kpl_lab/
STAMP = "kpl-user-env.json"
DEFAULT_PYTHON = "/usr/bin/python3"


def reachable_by_others(path: str | os.PathLike) -> bool:
    """Say whether an account with no special rights can read (and enter) `path` and its folders."""
    path = Path(path).resolve()
    for folder in path.parents:
        if not os.stat(folder).st_mode & stat.S_IXOTH:
            return False
    mode = os.stat(path).st_mode
    wanted = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(mode) or mode & stat.S_IXUSR else 0)
    return mode & wanted == wanted


def requirements(distribution: str = DISTRIBUTION) -> list[str]:
    """Return the distribution's own requirements (extras left out), as it declares them.

    Not the versions installed here: the users' Python may be an older patch release that
    some of them refuse (Debian's 3.11.2 against `Requires-Python >=3.11.5`).
    """
    wanted = []
    for text in importlib.metadata.distribution(distribution).requires or []:
        requirement = Requirement(text)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            wanted.append(str(requirement))
    return wanted


def _python_of(env: Path) -> Path:
    return env / "bin" / "python"


def prepare(
    home: str | os.PathLike, python: str = "", base: str = DEFAULT_PYTHON, log: Callable[[str], None] = print
) -> Path:
    """Return the Python users' servers and jobs run: `python` as it is, this one, or `<home>/user-env`."""
    if python:
        if not reachable_by_others(python):
            raise RuntimeError(f"{python} cannot be executed by other accounts")
        return Path(python)
    if reachable_by_others(sys.executable) and reachable_by_others(SOURCE):
        return Path(sys.executable)
    return build(Path(home) / "user-env", base, log)


def build(
    env: Path, base: str = DEFAULT_PYTHON, log: Callable[[str], None] = print, force: bool = False
) -> Path:
    """Return the Python of the virtual environment `env` on `base`, built unless its stamp matches."""
    if not reachable_by_others(base):
        raise RuntimeError(f"{base} cannot be executed by other accounts: name one that can")
    pins = requirements()
    wanted = {
        "python": str(Path(base).resolve()),
        "requirements": hashlib.sha256("\n".join(pins).encode()).hexdigest(),
        "source": str(SOURCE),
    }
    stamp = env / STAMP
    if not force and stamp.is_file() and json.loads(stamp.read_text()) == wanted:
        return _python_of(env)
    started = time.monotonic()
    log(f"building the users' Python environment {env} on {base} ({len(pins)} packages; once, then cached)")
    if env.exists():
        shutil.rmtree(env)
    previous = os.umask(0o022)  # every account reads and executes it
    try:
        subprocess.run([base, "-m", "venv", str(env)], check=True)
        with subprocess.Popen(
            [
                str(_python_of(env)),
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--no-input",
                *pins,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ) as pip:
            for line in pip.stdout:
                if line.startswith(("Collecting", "Installing", "Successfully", "ERROR")):
                    log("  " + line.rstrip()[:200])
        if pip.returncode != 0:
            raise RuntimeError(
                f"pip could not install the users' environment in {env} (exit {pip.returncode})"
            )
        _add_platform(env)
        stamp.write_text(json.dumps(wanted))
    finally:
        os.umask(previous)
    log(f"users' Python environment ready in {time.monotonic() - started:.0f} s: {_python_of(env)}")
    return _python_of(env)


def _add_platform(env: Path) -> None:
    """Make this kpl_lab importable in `env`, with its server extension enabled and its labextension."""
    site = Path(
        subprocess.run(
            [str(_python_of(env)), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    if reachable_by_others(SOURCE):
        (site / "kpl_lab_source.pth").write_text(str(SOURCE) + "\n")
    else:
        for package in PACKAGES:
            shutil.copytree(SOURCE / package, site / package, ignore=shutil.ignore_patterns("__pycache__"))
    prefix = Path(sys.prefix)
    for relative in (
        "etc/jupyter/jupyter_server_config.d/kpl_lab.json",
        "share/jupyter/labextensions/kpl-lab",
    ):
        source = prefix / relative
        if source.is_dir():
            shutil.copytree(source, env / relative, dirs_exist_ok=True)
        elif source.is_file():
            (env / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, env / relative)
