"""The Python environment users' notebooks and jobs run from: executable by every account.

Users' servers and jobs run as the users' own OS accounts, so their Python must be one
that other accounts can execute. When the platform's own Python is (installed under
/usr or /opt), it is used as it is. Otherwise (a Python under /root, mode 700) a virtual
environment is built once at `<home>/user-env` on a Python they can execute (Debian's
/usr/bin/python3 by default), with the platform's requirements
as kpl-lab declares them, and this very kpl_lab: a `.pth` line to its source folder when other
accounts can read it (an editable install), else a copy of the packages. A stamp file
records what it was built from; the next `kpl-lab up` reuses it while that is unchanged.

The `demo` extra (PyTorch, for the example algorithms) comes along when it is installed
here. PyTorch is then copied from this Python when both are the same Python version (the
very build the admin chose, CPU-only or CUDA, with no second download of hundreds of MB);
otherwise pip installs it, on a Linux x86-64 machine with no NVIDIA driver from its CPU
wheel index when that answers (instead of several GB of CUDA libraries).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import stat
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from packaging.requirements import Requirement

DISTRIBUTION = "kpl-lab"
PACKAGES = ("kpl_lab", "kpl_dataset", "kpl_helper")
SOURCE = Path(__file__).resolve().parents[2]  # the folder holding kpl_lab/
STAMP = "kpl-user-env.json"
DEFAULT_PYTHON = "/usr/bin/python3"
DEMO_EXTRA = "demo"  # what the example algorithms need (PyTorch)
# the extras that come along when installed here: the examples' PyTorch, and what the platform's own
# processes (which run on this Python under `kpl-lab up` as root) use: PostgreSQL, ONNX, fast checksums
EXTRAS = (DEMO_EXTRA, "torch", "postgresql", "onnx", "fast")
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
INDEX_PROBE_SECONDS = 5.0
COPIED = ("torch",)  # large compiled packages taken from this Python rather than downloaded again


def reachable_by_others(path: str | os.PathLike) -> bool:
    """Say whether an account with no special rights can read (and enter) `path` and its folders."""
    path = Path(path).resolve()
    for folder in path.parents:
        if not os.stat(folder).st_mode & stat.S_IXOTH:
            return False
    mode = os.stat(path).st_mode
    wanted = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(mode) or mode & stat.S_IXUSR else 0)
    return mode & wanted == wanted


def declared(distribution: str = DISTRIBUTION) -> list[Requirement]:
    """Return what the installed distribution declares it requires, extras included."""
    return [Requirement(text) for text in importlib.metadata.distribution(distribution).requires or []]


def requirements(distribution: str = DISTRIBUTION, extras: tuple[str, ...] = ()) -> list[str]:
    """Return the distribution's own requirements and those of `extras`, as it declares them.

    Not the versions installed here: the users' Python may be an older patch release that
    some of them refuse (Debian's 3.11.2 against `Requires-Python >=3.11.5`).
    """
    wanted = []
    for requirement in declared(distribution):
        marker = requirement.marker
        if marker is None or marker.evaluate({"extra": ""}):
            wanted.append(str(requirement))
        elif any(marker.evaluate({"extra": extra}) for extra in extras):
            requirement.marker = None  # pip would skip a line that says `extra == "demo"`
            wanted.append(str(requirement))
    return wanted


def installed_extras(distribution: str = DISTRIBUTION, extras: tuple[str, ...] = EXTRAS) -> tuple[str, ...]:
    """Return those of `extras` whose every requirement is installed here (`pip install -e ".[demo]"`)."""
    found = []
    for extra in extras:
        pins = [
            requirement
            for requirement in declared(distribution)
            if requirement.marker is not None
            and not requirement.marker.evaluate({"extra": ""})
            and requirement.marker.evaluate({"extra": extra})
        ]
        if pins and all(_installed(pin) for pin in pins):
            found.append(extra)
    return tuple(found)


def _installed(requirement: Requirement) -> bool:
    try:
        version = importlib.metadata.version(requirement.name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return requirement.specifier.contains(version, prereleases=True)


def has_nvidia_driver() -> bool:
    """Say whether this machine has an NVIDIA driver loaded (then CUDA wheels are worth their size)."""
    return Path("/proc/driver/nvidia").exists()


def index_options(pins: list[str], log: Callable[[str], None] = print) -> list[str]:
    """Return pip's options for `pins`: PyTorch's CPU wheel index where it fits and answers."""
    if not any(Requirement(pin).name == "torch" for pin in pins):
        return []
    if sys.platform != "linux" or platform.machine() != "x86_64" or has_nvidia_driver():
        return []  # elsewhere PyPI's own wheels are the CPU ones, or the GPU is used
    try:
        urllib.request.urlopen(TORCH_CPU_INDEX + "/torch/", timeout=INDEX_PROBE_SECONDS).close()
    except OSError as error:
        log(f"PyTorch from the usual indexes ({TORCH_CPU_INDEX} does not answer: {error})")
        return []
    log(f"PyTorch's CPU wheels from {TORCH_CPU_INDEX} (no NVIDIA driver here)")
    return ["--extra-index-url", TORCH_CPU_INDEX]


def python_of(env: Path) -> Path:
    """Return the python of a virtual environment."""
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


def copied_packages(pins: list[str], base: str) -> dict[str, str]:
    """Return name -> version of the `COPIED` packages among `pins` that `base` can take from here.

    Only when `base` is the same Python version as this one: compiled code is built for one.
    """
    names = [Requirement(pin).name for pin in pins if Requirement(pin).name in COPIED]
    if not names:
        return {}
    minor = subprocess.run(
        [base, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if minor != f"{sys.version_info[0]}.{sys.version_info[1]}":
        return {}
    found = {}
    for name in names:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def build(
    env: Path, base: str = DEFAULT_PYTHON, log: Callable[[str], None] = print, force: bool = False
) -> Path:
    """Return the Python of the virtual environment `env` on `base`, built unless its stamp matches."""
    if not reachable_by_others(base):
        raise RuntimeError(f"{base} cannot be executed by other accounts: name one that can")
    pins = requirements(extras=installed_extras())
    copied = copied_packages(pins, base)
    wanted = {
        "python": str(Path(base).resolve()),
        "requirements": hashlib.sha256("\n".join(pins).encode()).hexdigest(),
        "source": str(SOURCE),
    }
    if copied:
        wanted["copied"] = copied
    stamp = env / STAMP
    if not force and stamp.is_file() and json.loads(stamp.read_text()) == wanted:
        add_scripts(env)  # an environment built before it had them
        return python_of(env)
    started = time.monotonic()
    log(f"building the users' Python environment {env} on {base} ({len(pins)} packages; once, then cached)")
    if env.exists():
        shutil.rmtree(env)
    previous = os.umask(0o022)  # every account reads and executes it
    try:
        subprocess.run([base, "-m", "venv", str(env)], check=True)
        for name, version in copied.items():
            log(f"  copying {name} {version} from {sys.executable}")
            _copy_distribution(name, _site_packages(env))
        options = [] if "torch" in copied else index_options(pins, log)
        with subprocess.Popen(
            [
                str(python_of(env)),
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--no-input",
                *options,
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
        add_scripts(env)
        stamp.write_text(json.dumps(wanted))
    finally:
        os.umask(previous)
    log(f"users' Python environment ready in {time.monotonic() - started:.0f} s: {python_of(env)}")
    return python_of(env)


def _site_packages(env: Path) -> Path:
    return Path(
        subprocess.run(
            [str(python_of(env)), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )


def _copy_distribution(name: str, site: Path) -> None:
    """Copy an installed distribution's files (as its RECORD lists them) into `site`; scripts stay behind."""
    distribution = importlib.metadata.distribution(name)
    for file in distribution.files or []:
        if file.parts[0] == ".." or "__pycache__" in file.parts:
            continue  # console scripts name this Python; bytecode is written again
        source = Path(distribution.locate_file(file))
        if source.is_file():
            target = site / file
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
            target.chmod(target.stat().st_mode | 0o444)


def add_scripts(env: Path, distribution: str = DISTRIBUTION) -> list[Path]:
    """Write the distribution's commands (`kpl-lab`, `kpl-dataset`, `khelper`) into `env`'s bin, run by `env`'s Python.

    The platform's own scripts name the administrator's Python, which users' accounts may not run.
    """
    written = []
    for entry in importlib.metadata.distribution(distribution).entry_points.select(group="console_scripts"):
        module, _, function = entry.value.partition(":")
        script = env / "bin" / entry.name
        text = (
            f"#!{python_of(env)}\nimport sys\nfrom {module} import {function.split('.')[0]}\n"
            f"sys.exit({function}())\n"
        )
        if not (script.is_file() and script.read_text() == text):
            script.write_text(text)
        script.chmod(0o755)
        written.append(script)
    return written


def _add_platform(env: Path) -> None:
    """Make this kpl_lab importable in `env`, with its server extension enabled and its labextension."""
    site = _site_packages(env)
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
