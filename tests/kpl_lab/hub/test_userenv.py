"""The users' Python: which one `kpl-lab up` picks, what it installs, and that it is cached."""

from __future__ import annotations

import importlib.metadata
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from kpl_lab.hub import userenv


def test_requirements_are_kpl_labs_own_without_extras():
    wanted = userenv.requirements()
    names = {w.split(">")[0].split("=")[0].split("<")[0] for w in wanted}
    assert {"jupyterhub", "jupyterlab", "sqlalchemy", "pyarrow"} <= names
    assert not names & {"pytest", "torch", "ruff"}  # extras are left out


def test_reachable_by_others(open_folder):
    folder = open_folder / "bin"
    folder.mkdir(mode=0o700)
    private = folder / "python"
    private.write_text("")
    private.chmod(0o755)
    assert not userenv.reachable_by_others(private)  # its folder is closed
    folder.chmod(0o755)
    assert userenv.reachable_by_others(private)
    private.chmod(0o750)
    assert not userenv.reachable_by_others(private)


def test_prepare_picks_a_named_python_or_this_one_before_building(tmp_path, monkeypatch):
    monkeypatch.setattr(userenv, "reachable_by_others", lambda path: True)
    monkeypatch.setattr(userenv, "build", lambda *args, **kwargs: pytest.fail("nothing to build"))
    assert userenv.prepare(tmp_path, "/opt/py/bin/python") == Path("/opt/py/bin/python")
    assert userenv.prepare(tmp_path) == Path(sys.executable)

    monkeypatch.setattr(userenv, "reachable_by_others", lambda path: str(path) != sys.executable)
    built = []
    monkeypatch.setattr(
        userenv, "build", lambda env, base, log: built.append((env, base)) or env / "bin/python"
    )
    assert userenv.prepare(tmp_path, base="/usr/bin/python3.12") == tmp_path / "user-env" / "bin/python"
    assert built == [(tmp_path / "user-env", "/usr/bin/python3.12")]


def test_a_python_other_accounts_cannot_run_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(userenv, "reachable_by_others", lambda path: False)
    with pytest.raises(RuntimeError, match="cannot be executed by other accounts"):
        userenv.prepare(tmp_path, "/root/.pyenv/bin/python")


def test_a_built_environment_is_reused_while_its_stamp_matches(user_python):
    env = Path(user_python).parents[1]
    stamp = json.loads((env / userenv.STAMP).read_text())
    assert stamp["source"] == str(userenv.SOURCE)
    lines = []
    assert userenv.build(env, log=lines.append) == Path(user_python)
    assert lines == []  # nothing built, nothing said
    assert userenv.reachable_by_others(user_python)


def test_the_users_python_has_the_platforms_commands_run_by_itself(user_python):
    env = Path(user_python).parents[1]
    script = env / "bin" / "kpl-lab"
    script.unlink()  # an environment built before it had them gets them at the next start
    userenv.build(env, log=lambda line: None)
    assert script.read_text().splitlines()[0] == f"#!{user_python}"
    assert userenv.reachable_by_others(script)
    for command in ("kpl-lab", "kpl-dataset", "khelper"):
        done = subprocess.run([str(env / "bin" / command), "--help"], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert "usage" in done.stdout.lower()


def declares(monkeypatch, *texts: str) -> None:
    """Make kpl-lab declare these requirements (as its installed metadata would)."""
    monkeypatch.setattr(
        userenv, "declared", lambda distribution=userenv.DISTRIBUTION: [Requirement(t) for t in texts]
    )


def test_the_demo_extra_comes_along_only_when_installed_here(monkeypatch):
    declares(monkeypatch, "pyyaml>=6", 'torch>=2.2; extra == "demo"', 'pytest; extra == "test"')
    assert userenv.requirements() == ["pyyaml>=6"]
    assert userenv.requirements(extras=("demo",)) == ["pyyaml>=6", "torch>=2.2"]  # no marker: pip takes it
    assert userenv.installed_extras() == ("demo",)  # torch is installed here (the test extra has it)
    declares(monkeypatch, "pyyaml>=6", 'no-such-package-of-kpl>=1; extra == "demo"')
    assert userenv.installed_extras() == ()


def test_kpl_lab_from_a_source_folder_declares_what_its_pyproject_says(tmp_path, monkeypatch):
    # an editable install's metadata is as old as its install: the source may need more since
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "kpl-lab"\ndependencies = ["pyyaml>=6", "httptools>=0.6"]\n'
        '[project.optional-dependencies]\ndemo = ["scikit-learn>=1.4"]\ntorch = ["torch>=2.2"]\n'
        'test = ["torch>=2.2", "pytest>=8"]\n'
    )
    monkeypatch.setattr(userenv, "SOURCE", tmp_path)
    assert userenv.requirements() == ["pyyaml>=6", "httptools>=0.6"]
    assert userenv.requirements(extras=("torch", "test")) == [
        "pyyaml>=6",
        "httptools>=0.6",
        "torch>=2.2",
        "pytest>=8",
    ]
    assert "scikit-learn>=1.4" in userenv.requirements(extras=("demo",))


def test_pytorch_comes_from_its_cpu_index_only_without_an_nvidia_driver_and_when_it_answers(monkeypatch):
    said = []
    monkeypatch.setattr(userenv.platform, "machine", lambda: "x86_64")
    assert userenv.index_options(["pyyaml>=6"], said.append) == []
    monkeypatch.setattr(userenv, "has_nvidia_driver", lambda: True)
    assert userenv.index_options(["torch>=2.2"], said.append) == []
    monkeypatch.setattr(userenv, "has_nvidia_driver", lambda: False)

    def unreachable(url, timeout):
        raise OSError("Name or service not known")

    monkeypatch.setattr(userenv.urllib.request, "urlopen", unreachable)
    assert userenv.index_options(["torch>=2.2"], said.append) == []
    assert said == [
        f"PyTorch from the usual indexes ({userenv.TORCH_CPU_INDEX} does not answer: Name or service not known)"
    ]
    monkeypatch.setattr(userenv.urllib.request, "urlopen", lambda url, timeout: io.BytesIO(b"<html>"))
    assert userenv.index_options(["torch>=2.2"], said.append) == [
        "--extra-index-url",
        userenv.TORCH_CPU_INDEX,
    ]


def test_the_closure_is_what_is_installed_here_and_the_rest_is_left_to_pip():
    taken, to_install = userenv.installed_closure(["jupyterhub>=5", "no-such-package-of-kpl>=1"])
    assert {"jupyterhub", "sqlalchemy", "alembic", "tornado", "traitlets"} <= set(taken)
    assert taken["jupyterhub"].version == importlib.metadata.version("jupyterhub")
    assert to_install == ["no-such-package-of-kpl>=1"]
    # an extra asked for brings its own requirements
    plain, _ = userenv.installed_closure(["psycopg>=3.1"])
    binary, _ = userenv.installed_closure(["psycopg[binary]>=3.1"])
    assert "psycopg-binary" in set(binary) - set(plain)
    # a version installed here that the requirement refuses is pip's
    version = importlib.metadata.version("pyyaml")
    assert userenv.installed_closure([f"pyyaml!={version}"]) == ({}, [f"pyyaml!={version}"])


def test_a_distribution_whose_requires_python_refuses_the_base_is_left_to_pip(monkeypatch):
    taken, to_install = userenv.installed_closure(["pyyaml"], "3.11.7")
    assert list(taken) == ["pyyaml"] and to_install == []
    monkeypatch.setattr(userenv, "_runs_on", lambda distribution, version: version != "3.0.0")
    assert userenv.installed_closure(["pyyaml>=5"], "3.0.0") == ({}, ["pyyaml>=5"])


@pytest.mark.slow
def test_the_users_python_takes_what_is_installed_here_without_pip(monkeypatch, open_folder):
    declares(monkeypatch, "pyyaml>=6", 'torch>=2.2; extra == "torch"', 'pytest; extra == "test"')
    said = []
    env = open_folder / "user-env"
    python = userenv.build(env, log=said.append)
    assert said[1].startswith("  taking ") and said[1].endswith(
        f"installed packages from {sys.prefix} (no download)"
    )
    assert not [line for line in said if "pip" in line]  # nothing downloaded, nothing installed by pip
    stamp = json.loads((env / userenv.STAMP).read_text())
    assert stamp["taken"]["torch"] == importlib.metadata.version("torch")
    assert "pytest" not in stamp["taken"]  # an extra not asked for stays behind
    # another account runs it: the packages, their scripts (with this python named) and kpl_lab
    check = (
        "import torch, yaml, kpl_lab; print(torch.__version__, int(torch.ones(3).sum()), yaml.__version__)"
    )
    done = subprocess.run(
        ["runuser", "-u", "nobody", "--", str(python), "-c", check],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.stdout.split() == [
        importlib.metadata.version("torch"),
        "3",
        importlib.metadata.version("pyyaml"),
    ], done.stderr
    assert (env / "bin" / "torchrun").read_text().startswith(f"#!{python}\n")
    said.clear()
    assert userenv.build(env, log=said.append) == python and said == []  # cached
