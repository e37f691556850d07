"""Fixtures shared by every test: a platform whose home is a temporary folder, on SQLite or PostgreSQL.

Modules marked `databases` run each test twice, through the one parametrised
`database_url` fixture: on SQLite (the platform's default under its home) and on a
fresh database of a PostgreSQL server the session starts on a loopback port.
`KPL_TEST_POSTGRESQL=skip` leaves the PostgreSQL variants out; CI refuses it.
Tests of multi-user isolation make test OS accounts (`account_prefix`).
"""

from __future__ import annotations

import itertools
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine

from kpl_lab.catalog.migrate import seed_write_lock, upgrade
from kpl_lab.platform import Platform
from kpl_lab.testing import environments
from kpl_lab.testing.accounts import remove_accounts
from kpl_lab.testing.postgres import THROWAWAY_SETTINGS, PostgresServer, PostgresUnavailable

OPT_OUT = "KPL_TEST_POSTGRESQL"
TEMPLATE = "kpl_template"


def database_kinds() -> list[str]:
    """Return the catalog databases tests run on: SQLite and PostgreSQL, unless PostgreSQL is opted out."""
    if os.environ.get(OPT_OUT) != "skip":
        return ["sqlite", "postgresql"]
    if os.environ.get("CI") == "true":
        raise pytest.UsageError(f"{OPT_OUT}=skip is refused in CI: the PostgreSQL variants must run there")
    return ["sqlite"]


def pytest_generate_tests(metafunc):
    if "database_url" in metafunc.fixturenames and metafunc.definition.get_closest_marker("databases"):
        metafunc.parametrize("database_url", database_kinds(), indirect=True)


class Postgres:
    """The session's PostgreSQL server and its databases: empty ones or copies of a migrated template."""

    def __init__(self, server: PostgresServer) -> None:
        self.server = server
        self._numbers = itertools.count()

    def database(self, migrated: bool = True) -> str:
        """Create a database and return its URL."""
        name = f"kpl_test_{next(self._numbers)}"
        return self.server.create_database(name, template=TEMPLATE if migrated else None)

    def drop(self, url: str) -> None:
        """Drop a database made by `database`."""
        self.server.drop_database(url.rsplit("/", 1)[1])


@pytest.fixture(scope="session")
def postgres():
    """Start a throwaway PostgreSQL server with a migrated template database; stop it at the end."""
    try:
        server = PostgresServer(THROWAWAY_SETTINGS)
    except PostgresUnavailable as error:
        pytest.fail(f"{error} (or set {OPT_OUT}=skip to leave out the PostgreSQL variants)", pytrace=False)
    server.start()
    try:
        engine = create_engine(server.create_database(TEMPLATE))
        upgrade(engine)
        seed_write_lock(engine)
        engine.dispose()  # a template must have no connections when it is copied
        yield Postgres(server)
    finally:
        server.stop()


@pytest.fixture
def database_url(request):
    """Return the catalog database of this test: None (SQLite under the platform's home) or a PostgreSQL URL."""
    if getattr(request, "param", "sqlite") == "sqlite":
        yield None
        return
    postgres = request.getfixturevalue("postgres")
    url = postgres.database()
    yield url
    postgres.drop(url)


@pytest.fixture
def empty_database_url(database_url, request, tmp_path):
    """Return an empty database of this test's kind, with no schema yet."""
    if database_url is None:
        return f"sqlite:///{tmp_path / 'empty.sqlite'}"
    postgres = request.getfixturevalue("postgres")
    url = postgres.database(migrated=False)
    request.addfinalizer(lambda: postgres.drop(url))
    return url


@pytest.fixture
def platform(tmp_path, monkeypatch, database_url):
    """Return an embedded platform (local storage) under tmp_path, on this test's database."""
    home = tmp_path / "kpl-home"
    monkeypatch.setenv("KPL_LAB_HOME", str(home))
    plat = Platform(home=str(home), **({"database_url": database_url} if database_url else {}))
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


@pytest.fixture
def privileged_helper(account_prefix, open_folder):
    """Start the privileged helper for the home `open_folder/home` (its service account: root, this process).

    Returns its socket's path. The home's storage is its default, `<home>/storage`. The platform under test runs as root here; the tests of `kpl-lab up`
    and of the hub run it as a service account of its own.
    """
    home = open_folder / "home"
    home.mkdir(mode=0o711)
    socket = home / "run" / "helper.sock"
    log = open_folder / "helper.log"
    with open(log, "w") as output:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kpl_lab.privileged.helper",
                f"--home={home}",
                f"--storage={home / 'storage'}",
                "--service-account=root",
                f"--account-prefix={account_prefix}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        for _ in range(600):
            if socket.exists() or process.poll() is not None:
                break
            time.sleep(0.05)
        assert socket.exists(), log.read_text()
        yield socket
    finally:
        process.terminate()
        process.wait(timeout=30)


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

    Its folder is $KPL_TEST_USER_ENV, default /tmp/kpl-test-user-env; the first build takes seconds (it takes
    this Python's packages), minutes where the base Python is another minor version (pip installs them).
    """
    try:
        return str(environments.user_python())
    except environments.Unavailable as error:
        pytest.skip(str(error))
