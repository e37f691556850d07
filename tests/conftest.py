"""Fixtures shared by every test: a platform whose home is a temporary folder, test OS accounts."""

from __future__ import annotations

import fcntl
import grp
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from kpl_lab.engine.identity import group_prefix
from kpl_lab.hub import userenv
from kpl_lab.platform import Platform


@pytest.fixture
def platform(tmp_path, monkeypatch):
    """Return an embedded platform (SQLite + local storage) under tmp_path."""
    home = tmp_path / "kpl-home"
    monkeypatch.setenv("KPL_LAB_HOME", str(home))
    plat = Platform(home=str(home))
    yield plat
    plat.close()


@pytest.fixture
def account_prefix():
    """Return a prefix for test OS accounts and groups (`kt<hex>-`); all of them are removed afterwards."""
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("needs root and useradd")
    prefix = f"kt{secrets.token_hex(2)}-"
    yield prefix
    remove_accounts(prefix)


def remove_accounts(prefix: str) -> None:
    """Delete the OS accounts named `prefix*` and the groups of that prefix (users' and projects')."""
    for account in pwd.getpwall():
        if account.pw_name.startswith(prefix):
            subprocess.run(["userdel", account.pw_name], capture_output=True, check=False)
    for group in grp.getgrall():
        if group.gr_name.startswith((prefix, group_prefix(prefix))):
            subprocess.run(["groupdel", group.gr_name], capture_output=True, check=False)


@pytest.fixture
def open_folder():
    """Return a temporary folder that every account can pass through (pytest's own is root's, 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="kpl-test-"))
    folder.chmod(0o711)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def user_python() -> str:
    """Return the users' Python (`kpl-lab up`'s user-env), built once per machine and kept between runs.

    Its folder is $KPL_TEST_USER_ENV, default /tmp/kpl-test-user-env; the first build takes minutes.
    """
    if os.geteuid() != 0 or not userenv.reachable_by_others(userenv.DEFAULT_PYTHON):
        pytest.skip(f"needs root and {userenv.DEFAULT_PYTHON}")
    folder = Path(os.environ.get("KPL_TEST_USER_ENV", "/tmp/kpl-test-user-env"))
    with open(f"{folder}.lock", "a") as lock:  # test runs beside this one build it once
        fcntl.flock(lock, fcntl.LOCK_EX)
        return str(userenv.build(folder))
