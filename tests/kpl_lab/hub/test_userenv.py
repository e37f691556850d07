"""The users' Python: which one `kpl-lab up` picks, what it installs, and that it is cached."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

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
