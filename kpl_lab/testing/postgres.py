"""A throwaway PostgreSQL server on loopback, for the tests and the benchmarks.

It runs Debian's `postgresql` binaries (`initdb`, `pg_ctl`) from a temporary folder on a
port chosen at run time, trusts local connections, and is removed when stopped. As root it
runs as the `postgres` account, because PostgreSQL refuses to run as root.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

INSTALL_HINT = "install Debian's postgresql package (apt-get install postgresql)"
START_SECONDS = 120  # a cold start on two busy cores
PORT_TRIES = 5
# fast and fragile: a test server that dies loses nothing anyone needs
THROWAWAY_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


class PostgresUnavailable(RuntimeError):
    """The server binaries or the Python driver are missing."""


def find_binaries() -> Path:
    """Return the folder of `initdb` and `pg_ctl`: on PATH, else the newest /usr/lib/postgresql/<ver>/bin."""
    on_path = shutil.which("initdb")
    if on_path and shutil.which("pg_ctl"):
        return Path(on_path).resolve().parent
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: _version_key(p.parent.parent.name)
    )
    if versions:
        return versions[-1].parent
    raise PostgresUnavailable(f"PostgreSQL server binaries (initdb, pg_ctl) not found: {INSTALL_HINT}")


def _version_key(name: str) -> tuple:
    return tuple(int(part) if part.isdigit() else 0 for part in name.split("."))


def free_port() -> int:
    """Return a loopback port that is free now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PostgresServer:
    """One PostgreSQL cluster in a temporary folder; `start()` it, make databases, `stop()` it."""

    def __init__(self, settings: dict[str, str] | None = None, max_connections: int = 300) -> None:
        self.settings = {"max_connections": str(max_connections), **(settings or {})}
        self.bin = find_binaries()
        try:
            import psycopg  # noqa: F401  (the driver SQLAlchemy uses for postgresql:// URLs)
        except ImportError as error:
            raise PostgresUnavailable("psycopg 3 is missing: pip install 'psycopg[binary]'") from error
        self.folder: Path | None = None
        self.port = 0
        self._user = None
        if os.geteuid() == 0:
            try:
                self._user = pwd.getpwnam("postgres")
            except KeyError as error:
                raise PostgresUnavailable(
                    f"running as root needs the postgres account: {INSTALL_HINT}"
                ) from error

    @property
    def data(self) -> Path:
        return self.folder / "data"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        kwargs = {"user": self._user.pw_uid, "group": self._user.pw_gid} if self._user else {}
        return subprocess.run(
            [str(self.bin / args[0]), *args[1:]],
            capture_output=True,
            text=True,
            check=check,
            cwd=self.folder,
            **kwargs,
        )

    def start(self) -> str:
        """Create the cluster, start the server and return the URL of its `postgres` database."""
        self.folder = Path(tempfile.mkdtemp(prefix="kpl-postgres-"))
        if self._user:
            os.chown(self.folder, self._user.pw_uid, self._user.pw_gid)
        try:
            self._run(
                "initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"
            )
        except subprocess.CalledProcessError as error:
            self._remove()
            raise RuntimeError(f"initdb failed: {error.stderr or error.stdout}") from error
        for _ in range(PORT_TRIES):  # the port was free when picked; another process may take it first
            self.port = free_port()
            (self.folder / "server.log").unlink(missing_ok=True)
            options = {
                "listen_addresses": "127.0.0.1",
                "port": str(self.port),
                "unix_socket_directories": str(self.folder),
                **self.settings,
            }
            flags = " ".join(f"-c {name}={value}" for name, value in options.items())
            done = self._run(
                "pg_ctl", "-D", str(self.data), "-l", str(self.folder / "server.log"),
                "-o", flags, "-w", "-t", str(START_SECONDS), "start",
                check=False,
            )  # fmt: skip
            if done.returncode == 0:
                return self.url()
            if "address already in use" not in self.log().lower():
                break
        message = self.log()[-3000:] or done.stderr
        self._remove()
        raise RuntimeError(f"PostgreSQL did not start: {message}")

    def log(self) -> str:
        """Return the server's log."""
        path = self.folder / "server.log" if self.folder else None
        return path.read_text(errors="replace") if path and path.exists() else ""

    def url(self, database: str = "postgres") -> str:
        """Return the SQLAlchemy URL of one database of this server."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def execute(self, *statements: str) -> None:
        """Run statements outside a transaction (CREATE/DROP DATABASE need that)."""
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)

    def create_database(self, name: str, template: str | None = None) -> str:
        """Create a database, empty or as a copy of `template`, and return its URL."""
        copy = f" TEMPLATE {template}" if template else ""
        self.execute(f"CREATE DATABASE {name}{copy}")
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """Drop a database, disconnecting whoever is still connected to it."""
        self.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def stop(self) -> None:
        """Stop the server at once and remove its folder."""
        if self.folder is None:
            return
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False)
        self._remove()

    def _remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder = None

    def __enter__(self) -> PostgresServer:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
