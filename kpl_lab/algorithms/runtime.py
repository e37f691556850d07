"""Build and cache the local environment for `image.runs` (RUN5): one virtual environment per runs list."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .errors import EnvironmentBuildError

COMPLETE_MARKER = ".complete"
BUILD_LOG = "build.log"
TAIL_LINES = 20
# The platform ships its own kpl-dataset / kpl-helper; pip would fetch the incompatible originals.
PLATFORM_PACKAGES = ("kpl-dataset", "kpl-helper")
_PLATFORM_REQUIREMENT = re.compile(r"^kpl[-_.](dataset|helper)(\[[^\]]*\])?\s*([<>=!~;@].*)?$", re.IGNORECASE)
_PIP_OPTIONS_WITH_VALUE = frozenset(
    {
        "-i", "--index-url", "--extra-index-url", "-f", "--find-links", "-c", "--constraint", "-t", "--target",
        "--prefix", "--root", "--trusted-host", "--cache-dir", "--src", "--platform", "--python-version",
        "--implementation", "--abi", "--progress-bar", "--timeout", "--retries", "--proxy", "--log", "--cert",
        "--client-cert", "--exists-action", "--global-option", "--config-settings", "-C", "--upgrade-strategy",
        "--no-binary", "--only-binary", "--report", "--python",
    }
)  # fmt: skip
_PIP_REQUIREMENT_OPTIONS = frozenset({"-r", "--requirement", "-e", "--editable"})
_SHELL_OPERATORS = frozenset({"&&", "||", ";", "|", "&", "(", ")", ";;", "|&"})


@dataclass(frozen=True)
class Runtime:
    """The interpreter and environment variables a job of this algorithm must run with."""

    python: Path
    env: dict[str, str] = field(default_factory=dict)  # set on top of the job's environment
    venv: Path | None = None  # None: the platform's own interpreter


def environment_key(runs: Sequence[str]) -> str:
    """Return the cache key of an environment: a hash of the runs lines and the interpreter."""
    payload = json.dumps(
        {"runs": list(runs), "python": sys.version, "executable": os.path.realpath(sys.executable)},
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def platform_runtime(base_path: str | None = None) -> Runtime:
    """Return the platform's own interpreter, first on PATH so `python3 x.py` finds it."""
    bin_dir = str(Path(sys.executable).parent)
    return Runtime(python=Path(sys.executable), env={"PATH": _prepend(bin_dir, base_path)})


def prepare_runtime(
    runs: Sequence[str],
    cache_root: str | Path,
    log: Callable[[str], None] | None = None,
    base_path: str | None = None,
    line_timeout: float | None = None,
) -> Runtime:
    """Return the runtime for `runs`, building its virtual environment once (blocking).

    Two callers asking for the same environment wait for one build (a file lock); a
    failed build raises EnvironmentBuildError and is retried on the next call.
    """
    if not runs:
        return platform_runtime(base_path)
    cache_root = Path(cache_root)
    cache_root.mkdir(parents=True, exist_ok=True)
    key = environment_key(runs)
    folder = cache_root / key
    runtime = _venv_runtime(folder / "venv", base_path)
    if (folder / COMPLETE_MARKER).is_file():
        return runtime
    with open(cache_root / f"{key}.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if log:
                log(f"[kpl] waiting for another job building environment {key}")
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if (folder / COMPLETE_MARKER).is_file():
                return runtime
            previous = os.umask(0o022)  # shared by the jobs of every user: readable and executable by all
            try:
                _build(list(runs), folder, runtime, log, base_path, line_timeout)
            finally:
                os.umask(previous)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return runtime


def _venv_runtime(venv: Path, base_path: str | None) -> Runtime:
    return Runtime(
        python=venv / "bin" / "python",
        env={"PATH": _prepend(str(venv / "bin"), base_path), "VIRTUAL_ENV": str(venv)},
        venv=venv,
    )


def _prepend(folder: str, base_path: str | None) -> str:
    base = os.environ.get("PATH", os.defpath) if base_path is None else base_path
    return os.pathsep.join([folder, *[p for p in base.split(os.pathsep) if p and p != folder]])


def _build(
    runs: list[str],
    folder: Path,
    runtime: Runtime,
    log: Callable[[str], None] | None,
    base_path: str | None,
    line_timeout: float | None,
) -> None:
    if folder.exists():  # an earlier build failed or was interrupted: venvs are not relocatable, start over
        shutil.rmtree(folder)
    work = folder / "work"
    work.mkdir(parents=True)
    log_path = folder / BUILD_LOG
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONHOME", "PYTHONPATH")}
    env.update(runtime.env)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    with open(log_path, "w", encoding="utf-8") as log_file:

        def note(text: str) -> None:
            log_file.write(text + "\n")
            log_file.flush()
            tail.append(text)
            if log:
                log(text)

        started = time.monotonic()
        assert runtime.venv is not None
        _create_venv(runtime.venv, work, env, note)
        steps: list[list[str]] = []
        labels: list[str] = []
        for line in runs:
            cleaned, removed = strip_platform_packages(line)
            if removed:
                note(f"[kpl] removed {', '.join(removed)} from: {line} (the platform provides its own)")
            if cleaned is None:
                note(f"[kpl] skipped (nothing left to install): {line}")
                continue
            steps.append(["bash", "-c", cleaned])
            labels.append(cleaned)
        for command, label in zip(steps, labels, strict=True):
            note(f"$ {label}")
            code = _run(command, work, env, note, line_timeout)
            if code != 0:
                reason = "timed out" if code is None else f"exited with code {code}"
                raise EnvironmentBuildError(
                    f"building the environment failed: `{label}` {reason}", str(log_path), list(tail)
                )
        _unshadow_platform_packages(runtime, work, env, note)
        note(f"[kpl] environment ready in {time.monotonic() - started:.1f} s")
    shutil.rmtree(work, ignore_errors=True)
    marker = folder / COMPLETE_MARKER
    tmp = folder / f"{COMPLETE_MARKER}.tmp"
    tmp.write_text(json.dumps({"runs": runs, "python": sys.version, "built": time.time()}))
    os.replace(tmp, marker)  # written last: a folder without it is treated as absent


def _create_venv(venv: Path, cwd: Path, env: dict[str, str], note: Callable[[str], None]) -> None:
    """Create the venv; reuse the platform's pip through wrapper scripts when it has one (ensurepip is slow)."""
    note("$ python -m venv --system-site-packages --without-pip")
    command = [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)]
    if _run(command, cwd, env, note, None) != 0:
        raise EnvironmentBuildError(
            "creating the virtual environment failed", str(cwd.parent / BUILD_LOG), []
        )
    python = venv / "bin" / "python"
    if (
        subprocess.run([str(python), "-c", "import pip"], cwd=cwd, env=env, capture_output=True).returncode
        != 0
    ):
        note("$ python -m ensurepip --default-pip")
        if _run([str(python), "-m", "ensurepip", "--default-pip"], cwd, env, note, None) != 0:
            raise EnvironmentBuildError(
                "installing pip into the environment failed", str(cwd.parent / BUILD_LOG), []
            )
        return
    # pip run by the venv's python installs into the venv, like a pip of its own would
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    for name in ("pip", f"pip{sys.version_info.major}", f"pip{version}"):
        wrapper = venv / "bin" / name
        wrapper.write_text(f'#!/bin/sh\nexec "{python}" -m pip "$@"\n')
        wrapper.chmod(0o755)


def _run(
    command: list[str], cwd: Path, env: dict[str, str], note: Callable[[str], None], timeout: float | None
) -> int | None:
    """Run one build step, streaming its output to the log; None when it timed out."""
    with subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,
    ) as process:
        stdout = process.stdout
        assert stdout is not None
        reader = threading.Thread(target=lambda: [note(line.rstrip("\n")) for line in stdout], daemon=True)
        reader.start()
        try:
            code: int | None = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # the whole group: a shell line may have started children
            process.wait()
            code = None
        reader.join()
        return code


def strip_platform_packages(line: str) -> tuple[str | None, list[str]]:
    """Remove kpl-dataset / kpl-helper requirements from pip install commands in a shell line.

    The line is edited in place (quoting, variables and redirections untouched); a pip
    install left with nothing to install becomes `true pip install ...`. Returns (the line
    to run, or None when nothing is left to run; the removed requirements).
    """
    try:
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        return line, []  # unbalanced quotes: leave the line to bash, which reports it
    segments: list[list[str]] = [[]]
    for token in tokens:
        if token in _SHELL_OPERATORS:
            segments.append([])
        else:
            segments[-1].append(token)
    text, cursor, removed, noop_segments = line, 0, [], 0
    for segment in segments:
        drop, empties = _platform_requirements(segment)
        for position, token in enumerate(segment):
            match = _find_word(text, token, cursor)
            if match is None:
                continue
            if position == 0 and empties:
                text = f"{text[: match.start()]}true {text[match.start() :]}"
                cursor = match.end() + len("true ")
            elif position in drop:
                begin = (
                    match.start() - 1
                    if match.start() > 0 and text[match.start() - 1] == " "
                    else match.start()
                )
                text = text[:begin] + text[match.end() :]
                cursor = begin
                removed.append(token)
            else:
                cursor = match.end()
        noop_segments += empties or not segment
    if not removed:
        return line, []
    if noop_segments == len(segments):
        return None, removed
    return text, removed


def _find_word(text: str, word: str, start: int) -> re.Match[str] | None:
    """Find `word` as a whole shell word (optionally quoted) from `start`."""
    pattern = r"(?<![^\s;&|()])(['\"]?)" + re.escape(word) + r"\1(?![^\s;&|()])"
    return re.compile(pattern).search(text, start)


def _platform_requirements(segment: list[str]) -> tuple[set[int], bool]:
    """Return the positions of platform requirements in a pip install, and whether nothing else is installed."""
    install_at = _pip_install_index(segment)
    if install_at is None:
        return set(), False
    drop: set[int] = set()
    has_requirement = skip_next = False
    for position in range(install_at + 1, len(segment)):
        arg = segment[position]
        if skip_next:
            skip_next = False
        elif arg in _PIP_OPTIONS_WITH_VALUE or arg in _PIP_REQUIREMENT_OPTIONS:
            skip_next = True
            has_requirement |= arg in _PIP_REQUIREMENT_OPTIONS
        elif arg.startswith("-"):
            continue
        elif _PLATFORM_REQUIREMENT.match(arg):
            drop.add(position)
        else:
            has_requirement = True
    return drop, bool(drop) and not has_requirement


def _pip_install_index(segment: list[str]) -> int | None:
    """Return the index of `install` when the segment runs pip install, else None."""
    words = [word for word in segment if "=" not in word or word.startswith("-")]  # skip VAR=value prefixes
    if not words:
        return None
    program = os.path.basename(words[0])
    is_pip = re.fullmatch(r"pip[0-9.]*", program) is not None
    if re.fullmatch(r"python[0-9.]*", program) and len(words) > 2 and words[1:3] == ["-m", "pip"]:
        is_pip = True
    if not is_pip or "install" not in segment:
        return None
    return segment.index("install")


def _unshadow_platform_packages(
    runtime: Runtime, cwd: Path, env: dict[str, str], note: Callable[[str], None]
) -> None:
    """Uninstall kpl-dataset / kpl-helper that reached the venv another way (e.g. a requirements file)."""
    site = subprocess.run(
        [str(runtime.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    shadowing = [
        package for package in PLATFORM_PACKAGES if (Path(site) / package.replace("-", "_")).exists()
    ]
    if not shadowing:
        return
    note(f"[kpl] uninstalling {', '.join(shadowing)} from the environment (the platform provides its own)")
    _run([str(runtime.python), "-m", "pip", "uninstall", "-y", *shadowing], cwd, env, note, None)
    left = [package for package in shadowing if (Path(site) / package.replace("-", "_")).exists()]
    if left:
        raise EnvironmentBuildError(
            f"{', '.join(left)} in the environment would shadow the platform's own; remove it from image.runs",
            str(cwd.parent / BUILD_LOG),
            [],
        )
