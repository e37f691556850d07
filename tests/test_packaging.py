"""Packaging: the kpl-lab wheel, the standalone kpl-dataset and kpl-helper wheels, the installed extension."""

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import kpl_lab

REPO = Path(__file__).resolve().parents[1]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def run(*args: str | Path, cwd: Path, env: dict | None = None) -> str:
    """Run a command; fail the test with its output when it fails."""
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"{args} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return ANSI.sub("", done.stdout + done.stderr)


def build_wheel(project: Path, out: Path) -> Path:
    """Build the wheel of `project` into `out` with the build tools of this environment."""
    run(
        sys.executable, "-m", "pip", "wheel", project, "--no-deps", "--no-build-isolation", "-w", out, cwd=out
    )
    (wheel,) = out.glob("*.whl")
    return wheel


def fresh_venv(path: Path, *requirements: str | Path) -> Path:
    """Create a virtual environment holding only `requirements`; return its python."""
    run(sys.executable, "-m", "venv", "--without-pip", path, cwd=path.parent)
    python = path / "bin" / "python"
    run(sys.executable, "-m", "pip", "--python", python, "install", "-q", *requirements, cwd=path.parent)
    return python


def installed(python: Path) -> set[str]:
    """Name the distributions installed in the environment of `python`."""
    out = run(sys.executable, "-m", "pip", "--python", python, "list", "--format=json", cwd=python.parent)
    return {d["name"].lower() for d in json.loads(out[out.index("[") :])}


def isolated_env(home: Path) -> dict:
    """Environment variables with no KPL_* job settings and no PYTHONPATH."""
    return {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8"}


def test_labextension_version_is_the_python_version():
    package = json.loads((REPO / "labextension" / "package.json").read_text())
    assert package["name"] == "kpl-lab"
    assert package["version"] == kpl_lab.__version__


def test_standalone_build_hooks_are_the_same_file():
    hooks = [
        (REPO / "standalone" / name / "hatch_build.py").read_text() for name in ("kpl-dataset", "kpl-helper")
    ]
    assert hooks[0] == hooks[1]


def test_installed_server_extension_is_enabled(tmp_path):
    out = run(sys.executable, "-m", "jupyter", "server", "extension", "list", cwd=tmp_path)
    assert re.search(r"^\s*kpl_lab enabled$", out, re.MULTILINE), out
    assert re.search(rf"^\s*kpl_lab {re.escape(kpl_lab.__version__)} OK$", out, re.MULTILINE), out


def test_installed_labextension_is_enabled(tmp_path):
    out = run(sys.executable, "-m", "jupyter", "labextension", "list", cwd=tmp_path)
    assert re.search(rf"^\s*kpl-lab v{re.escape(kpl_lab.__version__)} enabled OK\b", out, re.MULTILINE), out


@pytest.fixture(scope="session")
def main_wheel(tmp_path_factory) -> Path:
    """Build the kpl-lab wheel from a clean copy of the repository (a production build of the extension)."""
    root = tmp_path_factory.mktemp("kpl-lab-src")
    files = run("git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", cwd=REPO)
    for name in filter(None, files.split("\0")):
        source = REPO / name
        if source.is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, root / name)
    # Reuse the installed node packages and yarn cache: the build itself still runs in full.
    for cached in ("node_modules", ".yarn"):
        if (REPO / "labextension" / cached).is_dir():
            (root / "labextension" / cached).symlink_to(REPO / "labextension" / cached)
    assert not (root / "kpl_lab" / "labextension").exists()
    return build_wheel(root, tmp_path_factory.mktemp("kpl-lab-wheel"))


@pytest.mark.slow
def test_main_wheel_ships_prebuilt_labextension_and_server_config(main_wheel):
    data = f"kpl_lab-{kpl_lab.__version__}.data/data"
    ext = f"{data}/share/jupyter/labextensions/kpl-lab"
    with zipfile.ZipFile(main_wheel) as wheel:
        names = set(wheel.namelist())
        package = json.loads(wheel.read(f"{ext}/package.json"))
        server_config = json.loads(wheel.read(f"{data}/etc/jupyter/jupyter_server_config.d/kpl_lab.json"))
        install = json.loads(wheel.read(f"{ext}/install.json"))
    assert package["version"] == kpl_lab.__version__
    assert f"{ext}/{package['jupyterlab']['_build']['load']}" in names
    assert f"{ext}/static/style.js" in names
    assert install["packageName"] == "kpl-lab"
    assert server_config == {"ServerApp": {"jpserver_extensions": {"kpl_lab": True}}}
    for module in (
        "kpl_lab/__init__.py",
        "kpl_lab/server_ext/app.py",
        "kpl_dataset/__init__.py",
        "kpl_helper/__init__.py",
        "kpl_lab/examples/datasets/digits.csv.gz",  # kpl-lab example, kpl-lab up's sample data
        "kpl_lab/examples/datasets/make_digits.py",
        "kpl_lab/examples/algorithms/image-classification/train.py",
        "kpl_lab/examples/algorithms/mlp-classification/train.py",  # the demo's sample algorithm
    ):
        assert module in names
    assert not [
        n for n in names if "node_modules" in n or n.endswith(".ts") or n.startswith("kpl_lab/labextension/")
    ]


@pytest.mark.slow
def test_kpl_dataset_wheel_works_with_only_pyarrow(tmp_path):
    wheel = build_wheel(REPO / "standalone" / "kpl-dataset", tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(f"kpl_dataset-{kpl_lab.__version__}.dist-info/METADATA").decode()
    requires = re.findall(r"^Requires-Dist: (.+)$", metadata, re.MULTILINE)
    # pyarrow is the only requirement; crc32c only with the optional `fast` extra
    assert requires == ["pyarrow>=15", "crc32c>=2.3; extra == 'fast'"]

    import pyarrow

    python = fresh_venv(tmp_path / "venv", wheel, f"pyarrow=={pyarrow.__version__}")
    assert installed(python) <= {"kpl-dataset", "pyarrow", "pip", "setuptools"}
    script = (
        "import importlib.util, json, sys\n"
        "from kpl_dataset import BasicType, ReadOnlyDataset, WriteOnlyDataset\n"
        "assert importlib.util.find_spec('kpl_lab') is None and importlib.util.find_spec('yaml') is None\n"
        "schema = {'name': BasicType.String, 'label': BasicType.Int, 'content': BasicType.ByteArray}\n"
        "with WriteOnlyDataset(sys.argv[1], None, schema) as writer:\n"
        "    for i in range(3):\n"
        "        writer.write({'name': f'r{i}', 'label': i, 'content': bytes([i]) * 4})\n"
        "reader = ReadOnlyDataset(sys.argv[1])\n"
        "print(json.dumps([len(reader), [[r['name'], r['label'], r['content'].hex()] for r in reader]]))\n"
        "reader.close()\n"
    )
    out = run(python, "-I", "-c", script, tmp_path / "dataset", cwd=tmp_path, env=isolated_env(tmp_path))
    assert json.loads(out) == [3, [["r0", 0, "00000000"], ["r1", 1, "01010101"], ["r2", 2, "02020202"]]]
    assert (tmp_path / "venv" / "bin" / "kpl-dataset").is_file()


@pytest.mark.slow
def test_kpl_helper_wheel_works_with_only_pyyaml(tmp_path):
    wheel = build_wheel(REPO / "standalone" / "kpl-helper", tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(f"kpl_helper-{kpl_lab.__version__}.dist-info/METADATA").decode()
    assert re.findall(r"^Requires-Dist: (\S+)", metadata, re.MULTILINE) == ["pyyaml>=6"]

    import yaml

    python = fresh_venv(tmp_path / "venv", wheel, f"pyyaml=={yaml.__version__}")
    assert installed(python) <= {"kpl-helper", "pyyaml", "pip", "setuptools"}
    (tmp_path / "parameter.yml").write_text("lr: 0.1\nmodel:\n  depth: 3\n")
    script = (
        "import importlib.util\n"
        "import kpl_helper\n"
        "assert importlib.util.find_spec('kpl_lab') is None and importlib.util.find_spec('pyarrow') is None\n"
        "p = kpl_helper.get_parameter(default='parameter.yml')\n"
        "print(p.lr, p.model.depth)\n"
    )
    out = run(python, "-I", "-c", script, cwd=tmp_path, env=isolated_env(tmp_path))
    assert out.split() == ["0.1", "3"]
    khelper = tmp_path / "venv" / "bin" / "khelper"  # entry point kpl_helper.cli.main:main, as the original
    assert "usage: khelper" in run(khelper, "--help", cwd=tmp_path, env=isolated_env(tmp_path))
