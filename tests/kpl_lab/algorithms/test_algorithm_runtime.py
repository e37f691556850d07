"""Cached local environments built from image.runs: real venvs, real subprocesses."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest

from kpl_lab.algorithms.errors import EnvironmentBuildError
from kpl_lab.algorithms.runtime import (
    BUILD_LOG,
    COMPLETE_MARKER,
    environment_key,
    prepare_runtime,
    strip_platform_packages,
)


def run_in(runtime, code: str) -> str:
    env = {**os.environ, **runtime.env}
    return subprocess.run(
        ["python3", "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_empty_runs_use_the_platform_interpreter(tmp_path):
    runtime = prepare_runtime([], tmp_path / "envs")
    assert runtime.venv is None and runtime.python == Path(sys.executable)
    assert runtime.env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
    assert run_in(runtime, "import sys; print(sys.prefix)") == sys.prefix
    assert not (tmp_path / "envs").exists()


def make_wheel(folder: Path) -> Path:
    """Write a minimal pure-Python wheel, so pip can really install it with no network."""
    files = {
        "kpl_demo_pkg/__init__.py": b"VALUE = 42\n",
        "kpl_demo_pkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: kpl-demo-pkg\nVersion: 1.0\n",
        "kpl_demo_pkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append("kpl_demo_pkg-1.0.dist-info/RECORD,,")
    path = folder / "kpl_demo_pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr("kpl_demo_pkg-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return path


def test_build_is_real_cached_and_isolated(tmp_path):
    wheel = make_wheel(tmp_path)
    runs = [
        f"pip install --no-index {wheel}",
        'command -v pip > "$VIRTUAL_ENV/which-pip.txt"',
        "echo hello-from-build",
    ]
    lines: list[str] = []
    runtime = prepare_runtime(runs, tmp_path / "envs", log=lines.append)
    folder = tmp_path / "envs" / environment_key(runs)
    assert runtime.venv == folder / "venv" and runtime.env["VIRTUAL_ENV"] == str(runtime.venv)
    assert runtime.env["PATH"].split(os.pathsep)[0] == str(runtime.venv / "bin")
    assert (runtime.venv / "which-pip.txt").read_text().strip() == str(runtime.venv / "bin" / "pip")
    log = (folder / BUILD_LOG).read_text()
    assert "$ echo hello-from-build\nhello-from-build\n" in log and "hello-from-build" in lines
    assert "Successfully installed kpl-demo-pkg-1.0" in log
    assert (folder / COMPLETE_MARKER).is_file()
    # pip installed into the venv only; the job's python3 is the venv's and still sees the platform
    assert run_in(runtime, "import kpl_demo_pkg; print(kpl_demo_pkg.__file__)").startswith(str(runtime.venv))
    assert run_in(runtime, "import sys; print(sys.prefix)") == str(runtime.venv)
    assert run_in(runtime, "import kpl_lab, os; print(os.path.dirname(kpl_lab.__file__))").endswith("kpl_lab")
    probe = subprocess.run([sys.executable, "-c", "import kpl_demo_pkg"], capture_output=True)
    assert probe.returncode != 0
    again: list[str] = []
    assert prepare_runtime(runs, tmp_path / "envs", log=again.append) == runtime
    assert again == []  # cached: nothing rebuilt


def test_failed_build_reports_tail_and_is_retried(tmp_path):
    count = tmp_path / "attempts.txt"
    runs = [f"echo attempt >> {count}", "echo before-failure", "exit 3"]
    with pytest.raises(EnvironmentBuildError) as info:
        prepare_runtime(runs, tmp_path / "envs")
    message = str(info.value)
    assert "building the environment failed: `exit 3` exited with code 3" in message
    assert "  | before-failure" in message and info.value.log_tail[-1] == "$ exit 3"
    folder = tmp_path / "envs" / environment_key(runs)
    assert not (folder / COMPLETE_MARKER).exists() and (folder / BUILD_LOG).is_file()
    with pytest.raises(EnvironmentBuildError):
        prepare_runtime(runs, tmp_path / "envs")
    assert count.read_text() == "attempt\nattempt\n"


def test_concurrent_callers_wait_for_one_build(tmp_path):
    count = tmp_path / "builds.txt"
    runs = [f"echo build >> {count}", "sleep 1"]
    logs: list[list[str]] = [[], []]
    results: list = [None, None]

    def build(index: int) -> None:
        results[index] = prepare_runtime(runs, tmp_path / "envs", log=logs[index].append)

    threads = [threading.Thread(target=build, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results[0] == results[1] and results[0] is not None
    assert count.read_text() == "build\n"


def test_folder_without_marker_is_rebuilt(tmp_path):
    runs = ["echo ok"]
    folder = tmp_path / "envs" / environment_key(runs)
    (folder / "venv").mkdir(parents=True)
    (folder / "venv" / "half-built").write_text("interrupted")
    runtime = prepare_runtime(runs, tmp_path / "envs")
    assert not (folder / "venv" / "half-built").exists() and (runtime.venv / "bin" / "python").exists()


def test_platform_packages_are_stripped_and_never_shadowed(tmp_path):
    runs = ["pip install --no-index kpl-dataset kpl-helper==0.1.3"]
    runtime = prepare_runtime(runs, tmp_path / "envs")
    log = (tmp_path / "envs" / environment_key(runs) / BUILD_LOG).read_text()
    assert "[kpl] removed kpl-dataset, kpl-helper==0.1.3 from: pip install" in log
    assert "[kpl] skipped (nothing left to install)" in log
    assert runtime.venv is not None

    sneaky = [
        'mkdir -p "$(python -c "import sysconfig; print(sysconfig.get_paths()[\'purelib\'])")/kpl_helper"'
    ]
    with pytest.raises(
        EnvironmentBuildError, match="kpl-helper in the environment would shadow the platform's own"
    ):
        prepare_runtime(sneaky, tmp_path / "envs")


def test_line_timeout(tmp_path):
    with pytest.raises(EnvironmentBuildError, match="`sleep 30` timed out"):
        prepare_runtime(["sleep 30"], tmp_path / "envs", line_timeout=1)


@pytest.mark.parametrize(
    ("line", "expected", "removed"),
    [
        (
            "pip3 install kpl-dataset kpl-helper matplotlib==2.2.4 -i https://pypi.tuna.tsinghua.edu.cn/simple",
            "pip3 install matplotlib==2.2.4 -i https://pypi.tuna.tsinghua.edu.cn/simple",
            ["kpl-dataset", "kpl-helper"],
        ),
        ("pip install kpl-helper==0.1.3 -i https://x", None, ["kpl-helper==0.1.3"]),
        (
            "apt-get update && pip install kpl_dataset && echo $HOME > f",
            "apt-get update && true pip install && echo $HOME > f",
            ["kpl_dataset"],
        ),
        (
            'python3 -m pip install "kpl-dataset>=0.0.9" numpy',
            "python3 -m pip install numpy",
            ["kpl-dataset>=0.0.9"],
        ),
        ("pip install -r req.txt KPL-Helper", "pip install -r req.txt", ["KPL-Helper"]),
        ("pip install kpl-dataset; pip install kpl-helper", None, ["kpl-dataset", "kpl-helper"]),
        ("echo kpl-helper && pip install kpl-helper x", "echo kpl-helper && pip install x", ["kpl-helper"]),
        ("echo kpl-dataset", "echo kpl-dataset", []),
        ("pip install kpl-datasets", "pip install kpl-datasets", []),
    ],
)
def test_strip_platform_packages(line, expected, removed):
    assert strip_platform_packages(line) == (expected, removed)
