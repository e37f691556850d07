"""The Python environment users' notebooks and jobs run from: executable by every account.

Users' servers and jobs run as the users' own OS accounts, so their Python must be one
that other accounts can execute. When the platform's own Python is (installed under
/usr or /opt), it is used as it is. Otherwise (a Python under /root, mode 700) a virtual
environment is built once at `<home>/user-env` on a Python they can execute (Debian's
/usr/bin/python3 by default), with the platform's requirements as kpl-lab declares them
(and the extras installed here: PyTorch, PostgreSQL, ONNX), and this very kpl_lab: a `.pth`
line to its source folder when other accounts can read it (an editable install), else a copy
of the packages. A stamp file records what it was built from; the next `kpl-lab up` reuses
it while that is unchanged.

When the base is this Python's minor version, every distribution those requirements need is
taken from this Python's installation as it is (hard links on the same filesystem, else
copies): seconds, and no download. Only what is not installed here, or whose Requires-Python
refuses the base's version, is left to pip; a base of another minor version gets everything
from pip (on a Linux x86-64 machine with no NVIDIA driver, PyTorch from its CPU wheel index
when that answers).
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

try:
    import tomllib
except ImportError:  # Python 3.10: the installed metadata only
    tomllib = None

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

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
PROGRESS_SECONDS = 2.0  # how often the build says how far it got


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
    """Return what the distribution requires, extras included (as `extra == "NAME"` markers).

    For kpl-lab run from a source folder (an editable install) its pyproject.toml says it: the
    installed metadata is as old as the install, and the code run may import more since.
    """
    project = SOURCE / "pyproject.toml"
    if distribution == DISTRIBUTION and project.is_file() and tomllib is not None:
        table = tomllib.loads(project.read_text())["project"]
        found = [Requirement(text) for text in table.get("dependencies", [])]
        for extra, texts in table.get("optional-dependencies", {}).items():
            for text in texts:
                requirement = Requirement(text)
                only = f'extra == "{extra}"'
                requirement.marker = Marker(
                    f"({requirement.marker}) and {only}" if requirement.marker else only
                )
                found.append(requirement)
        return found
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
    return list(dict.fromkeys(wanted))  # two extras may name one package alike


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


def same_minor(base: str) -> bool:
    """Say whether `base` is this Python's minor version (then compiled packages built here run there)."""
    minor = subprocess.run(
        [base, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return minor == f"{sys.version_info[0]}.{sys.version_info[1]}"


def base_version(base: str) -> str:
    """Return the full version of the Python `base` (what Requires-Python is checked against)."""
    return subprocess.run(
        [base, "-c", "import platform; print(platform.python_version())"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def installed_closure(
    pins: list[str], python_version: str = ""
) -> tuple[dict[str, importlib.metadata.Distribution], list[str]]:
    """Return the distributions installed here that `pins` need, by name, and the pins to install instead.

    Follows each distribution's own requirements (with the extras asked for). A requirement
    with no matching installation here, or one whose Requires-Python refuses `python_version`
    (the users' Python's), goes to the second list: pip installs those.
    """
    found: dict[str, importlib.metadata.Distribution] = {}
    missing: dict[str, str] = {}
    done: set[tuple[str, str]] = set()
    queue = [Requirement(pin) for pin in pins]
    while queue:
        requirement = queue.pop(0)
        name = canonicalize_name(requirement.name)
        wanted = {""} | set(requirement.extras)
        if all((name, extra) in done for extra in wanted):
            continue
        try:
            distribution = importlib.metadata.distribution(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            distribution = None
        refused = distribution is not None and not _runs_on(distribution, python_version)
        if (
            distribution is None
            or refused
            or not distribution.files
            or not requirement.specifier.contains(distribution.version, prereleases=True)
        ):
            requirement.marker = None
            missing.setdefault(name, str(requirement))
            done.update((name, extra) for extra in wanted)
            continue
        found[name] = distribution
        for extra in wanted - {e for n, e in done if n == name}:
            done.add((name, extra))
            for text in distribution.requires or []:
                needed = Requirement(text)
                if needed.marker is None or needed.marker.evaluate({"extra": extra}):
                    queue.append(needed)
    return found, list(missing.values())


def _runs_on(distribution: importlib.metadata.Distribution, python_version: str) -> bool:
    """Say whether `distribution`'s Requires-Python admits `python_version` (empty: this one)."""
    allowed = distribution.metadata.get("Requires-Python")
    if not allowed or not python_version:
        return True
    return SpecifierSet(allowed).contains(python_version, prereleases=True)


def build(
    env: Path, base: str = DEFAULT_PYTHON, log: Callable[[str], None] = print, force: bool = False
) -> Path:
    """Return the Python of the virtual environment `env` on `base`, built unless its stamp matches.

    On a `base` of this Python's minor version the installed distributions are taken from here
    (hard links where the filesystem allows, else copies): nothing is downloaded but what is not
    installed here. On another minor version pip installs the requirements.
    """
    if not reachable_by_others(base):
        raise RuntimeError(f"{base} cannot be executed by other accounts: name one that can")
    pins = requirements(extras=installed_extras())
    taken: dict[str, importlib.metadata.Distribution] = {}
    if same_minor(base):
        taken, to_install = installed_closure([*pins, "pip"], base_version(base))
    else:
        to_install = pins
    wanted = {
        "python": str(Path(base).resolve()),
        "requirements": hashlib.sha256("\n".join(pins).encode()).hexdigest(),
        "source": str(SOURCE),
        "taken": {name: distribution.version for name, distribution in sorted(taken.items())},
    }
    stamp = env / STAMP
    if not force and stamp.is_file() and json.loads(stamp.read_text()) == wanted:
        add_scripts(env)  # an environment built before it had them
        return python_of(env)
    started = time.monotonic()
    log(
        f"building the users' Python environment {env} on {base} ({len(pins)} requirements; once, then cached)"
    )
    if env.exists():
        shutil.rmtree(env)
    previous = os.umask(0o022)  # every account reads and executes it
    try:
        subprocess.run([base, "-m", "venv", *(["--without-pip"] if taken else []), str(env)], check=True)
        if taken:
            _take_installed(taken, env, log)
        else:
            log(
                f"  {base} is not Python {sys.version_info[0]}.{sys.version_info[1]}: pip installs everything"
            )
        if to_install:
            _pip_install(env, to_install, log)
        _add_platform(env)
        add_scripts(env)
        stamp.write_text(json.dumps(wanted))
    finally:
        os.umask(previous)
    log(f"users' Python environment ready in {time.monotonic() - started:.0f} s: {python_of(env)}")
    return python_of(env)


def _pip_install(env: Path, pins: list[str], log: Callable[[str], None]) -> None:
    """Install `pins` into `env` with its pip, saying what it collects."""
    if not (_site_packages(env) / "pip").is_dir():
        subprocess.run([str(python_of(env)), "-m", "ensurepip", "--default-pip"], check=True)
    log(f"  pip installs {len(pins)} not taken from here: {', '.join(pins)}")
    with subprocess.Popen(
        [
            str(python_of(env)),
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-input",
            *index_options(pins, log),
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
        raise RuntimeError(f"pip could not install the users' environment in {env} (exit {pip.returncode})")


def _take_installed(
    distributions: dict[str, importlib.metadata.Distribution], env: Path, log: Callable[[str], None]
) -> None:
    """Put the files of installed `distributions` into `env`, saying how far it got every few seconds."""
    site = _site_packages(env)
    log(f"  taking {len(distributions)} installed packages from {sys.prefix} (no download)")
    files = size = 0
    said = time.monotonic()
    for count, distribution in enumerate(distributions.values(), 1):
        taken = _take_distribution(distribution, site, env)
        files, size = files + taken[0], size + taken[1]
        if time.monotonic() - said >= PROGRESS_SECONDS or count == len(distributions):
            log(
                f"  {count}/{len(distributions)} packages ({files} files, {size / 1e6:.0f} MB): "
                f"{distribution.metadata['Name']} {distribution.version}"
            )
            said = time.monotonic()


def _take_distribution(
    distribution: importlib.metadata.Distribution, site: Path, env: Path
) -> tuple[int, int]:
    """Link (else copy) an installed distribution's files, as its RECORD lists them, into `env`.

    Files beside the packages go to `site`; data files (share/, etc/) under `env`; scripts get
    `env`'s python in their first line. Bytecode comes along: its source keeps its time.
    Return how many files and bytes.
    """
    own_site = Path(distribution.locate_file("")).resolve()
    prefix = own_site.parents[2]  # <prefix>/lib/pythonX.Y/site-packages
    files = size = 0
    for file in distribution.files or []:
        source = Path(distribution.locate_file(file)).resolve()
        if not source.is_file():
            continue
        if source.is_relative_to(own_site):
            target = site / source.relative_to(own_site)
        elif source.is_relative_to(prefix):
            target = env / source.relative_to(prefix)
        else:
            continue  # outside its installation (an editable project's folder): not ours to take
        if target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if (
            target.parent.name == "bin"
            and target.parent.parent == env
            and _rewrite_script(source, target, env)
        ):
            pass
        else:
            _link_or_copy(source, target)
        files += 1
        size += target.stat().st_size
    return files, size


def _link_or_copy(source: Path, target: Path) -> None:
    """Hard-link `source` at `target` when others may read it and the filesystem allows, else copy it."""
    if source.stat().st_mode & stat.S_IROTH:
        try:
            os.link(source, target)
            return
        except OSError:
            pass  # another filesystem, or links refused
    shutil.copy2(source, target)
    target.chmod(
        target.stat().st_mode | stat.S_IROTH | (stat.S_IXOTH if target.stat().st_mode & 0o100 else 0)
    )


def _rewrite_script(source: Path, target: Path, env: Path) -> bool:
    """Write a script whose first line names a python with `env`'s python there instead; say whether it did."""
    with open(source, "rb") as file:
        first = file.readline()
        if not (first.startswith(b"#!") and b"python" in first):
            return False
        rest = file.read()
    target.write_bytes(b"#!" + str(python_of(env)).encode() + b"\n" + rest)
    target.chmod(0o755)
    return True


def _site_packages(env: Path) -> Path:
    return Path(
        subprocess.run(
            [str(python_of(env)), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )


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
