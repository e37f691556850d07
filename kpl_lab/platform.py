"""The embedded platform: configuration, database, storage, catalog and jobs in one object."""

from __future__ import annotations

import contextlib
import copy
import os
import threading
from collections.abc import Iterator
from functools import cached_property
from logging import Logger
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session
from traitlets import List, Unicode, default, validate
from traitlets.config import Config, LoggingConfigurable

from .catalog.storage import Storage

if TYPE_CHECKING:
    from .catalog.service import Catalog
    from .engine.service import JobService
    from .experiments.search import ExperimentService
    from .monitoring.alerts import Alerts
    from .monitoring.audit import AuditLog
    from .privileged.client import HelperClient
    from .sandbox.pool import Sandbox
    from .serving.service import DeploymentService

SQLITE_BUSY_TIMEOUT_MS = 30_000
WRITE_LOCK_SQL = "SELECT id FROM ledger_lock WHERE id = 1 FOR UPDATE"
# settings the server extension (KPLLab) and the hub service (KPLService) once declared themselves
MOVED_SETTINGS = {
    "home": "Platform",
    "storage_url": "Platform",
    "database_url": "Platform",
    "default_project": "Platform",
    "devices": "Ledger",
    "cpu": "Ledger",
    "memory": "Ledger",
    "quotas": "Ledger",
    "executor_class": "JobService",
    "npu_reader": "Monitor",  # the hub service's, before the single-user server sampled too
    "history_seconds": "Monitor",
}


class Platform(LoggingConfigurable):
    """KPL Lab on one machine: a storage folder, a database and local job processes."""

    home = Unicode(help="Folder holding the platform's state; default $KPL_LAB_HOME or ~/.kpl-lab.").tag(
        config=True
    )

    storage_url = Unicode(
        help="Storage root for everything users create (a local folder for now); default <home>/storage."
    ).tag(config=True)

    database_url = Unicode(
        help="SQLAlchemy URL of the catalog database: sqlite:///PATH (default <home>/kpl.sqlite) or "
        "postgresql://USER:PASSWORD@HOST:PORT/DATABASE (psycopg 3: pip install 'kpl-lab[postgresql]')."
    ).tag(config=True)

    default_project = Unicode("default", help="Project used when none is named.").tag(config=True)

    helper_socket = Unicode(
        help="The privileged helper's socket; default <home>/run/helper.sock when it is there (`kpl-lab up` "
        "as root starts the helper): users' notebooks, jobs, deployments and sandboxed work then run as "
        "their own OS accounts. Empty: everything runs as this process's account.",
    ).tag(config=True)

    @default("helper_socket")
    def _default_helper_socket(self) -> str:
        # every process opening a separated home (the service, the CLI, a supervisor) runs users' work alike
        found = Path(self.home) / "run" / "helper.sock"
        return str(found) if found.exists() else ""

    passed_environment = List(
        Unicode(),
        help="Names of this process's environment variables that users' processes get too (`NAME` or "
        "`PREFIX*`), beyond the allowlist of kpl_lab.engine.environment (PATH, the locale, ...): e.g. "
        "HTTP_PROXY. Nothing else of the platform's environment reaches them.",
    ).tag(config=True)

    @default("home")
    def _default_home(self) -> str:
        return os.environ.get("KPL_LAB_HOME") or default_home()

    @validate("home")
    def _absolute_home(self, proposal) -> str:
        # job supervisors run in other folders: a relative home would point elsewhere there
        return str(Path(proposal["value"]).expanduser().absolute())

    @default("storage_url")
    def _default_storage_url(self) -> str:
        return str(Path(self.home) / "storage")

    @default("database_url")
    def _default_database_url(self) -> str:
        return f"sqlite:///{Path(self.home) / 'kpl.sqlite'}"

    # this process hosts the platform (runs its rounds: kpl_lab.rounds); else it only wakes the host
    hosting = False

    _engine_lock = threading.Lock()

    @property
    def engine(self) -> Engine:
        """Return the database engine, with the schema upgraded to the newest revision."""
        with self._engine_lock:
            if "_engine" not in self.__dict__:
                self.__dict__["_engine"] = self._open_engine()
        return self.__dict__["_engine"]

    def _open_engine(self) -> Engine:
        from .catalog.migrate import seed_write_lock, upgrade

        Path(self.home).mkdir(parents=True, exist_ok=True)
        engine = create_engine(database_url(self.database_url))
        if engine.dialect.name == "sqlite":
            _configure_sqlite(engine)
        upgrade(engine)
        if engine.dialect.name == "postgresql":
            seed_write_lock(engine)
            _configure_write_lock(engine)
        return engine

    @contextlib.contextmanager
    def session(self, immediate: bool = False) -> Iterator[Session]:
        """Yield a session; commit when the block succeeds, roll back when it raises.

        `immediate=True` takes the database's write lock at the start of the transaction
        (SQLite: BEGIN IMMEDIATE; PostgreSQL: a row lock on the one `ledger_lock` row), so
        read-then-write sequences of immediate sessions never interleave.
        """
        bind = self.engine.execution_options(immediate=True) if immediate else self.engine
        with Session(bind, expire_on_commit=False) as session:
            try:
                yield session
                session.commit()
            except BaseException:
                session.rollback()
                raise

    @cached_property
    def helper(self) -> HelperClient | None:
        """Return the privileged helper's client, None where everything runs as this account."""
        if not self.helper_socket:
            return None
        from .privileged.client import HelperClient

        return HelperClient(self.helper_socket)

    @cached_property
    def storage(self) -> Storage:
        """Return the storage root."""
        storage = Storage(self.storage_url)
        storage.root.mkdir(parents=True, exist_ok=True)
        return storage

    @cached_property
    def catalog(self) -> Catalog:
        """Return the catalog of datasets, models and algorithms."""
        from .catalog.service import Catalog

        return Catalog(self)

    @cached_property
    def jobs(self) -> JobService:
        """Return the job service."""
        from .engine.service import JobService

        return JobService(self)

    @staticmethod
    def import_job_modules() -> None:
        """Import now what opening the platform and recording a job import on first use."""
        from .catalog import migrate, service  # noqa: F401
        from .engine import service as job_service  # noqa: F401

    @cached_property
    def deployments(self) -> DeploymentService:
        """Return the deployment service."""
        from .serving.service import DeploymentService

        return DeploymentService(self)

    @cached_property
    def sandbox(self) -> Sandbox:
        """Return the sandboxed workers that parse and run what members supplied."""
        from .sandbox.pool import Sandbox

        return Sandbox(self)

    @cached_property
    def experiments(self) -> ExperimentService:
        """Return the hyperparameter searches (their trials are jobs)."""
        from .experiments.search import ExperimentService

        return ExperimentService(self)

    @cached_property
    def audit(self) -> AuditLog:
        """Return the audit log (platform data: administrators read it)."""
        from .monitoring.audit import AuditLog

        return AuditLog(self)

    @cached_property
    def alerts(self) -> Alerts:
        """Return the alert rules, their alerts and the notifier (platform data: administrators read them)."""
        from .monitoring.alerts import Alerts

        return Alerts(self)

    def close(self) -> None:
        """Release database connections."""
        if "alerts" in self.__dict__:
            self.alerts.notifier.close()
        if "audit" in self.__dict__:
            self.audit.flush()
        if "experiments" in self.__dict__:
            self.experiments.close()
        if "sandbox" in self.__dict__:
            self.sandbox.close()
        engine = self.__dict__.pop("_engine", None)
        if engine is not None:
            engine.dispose()


def default_home() -> str:
    """Return the platform home when none is set: /var/lib/kpl-lab for root, ~/.kpl-lab for anyone else.

    Root's own home is closed to other accounts (mode 0700), and under `kpl-lab up` as root the
    platform runs as its own system account, which must enter its home.
    """
    return "/var/lib/kpl-lab" if os.geteuid() == 0 else str(Path("~/.kpl-lab").expanduser())


def with_moved_settings(config: Config, section: str, log: Logger) -> Config:
    """Return `config` with deprecated `c.<section>.home`-style settings moved to Platform, Ledger, JobService.

    A setting given under its new name wins; each old name in use is logged as deprecated.
    """
    old = config.get(section, {})
    moved = [name for name in MOVED_SETTINGS if name in old]
    if not moved:
        return config
    config = copy.deepcopy(config)
    for name in moved:
        new = MOVED_SETTINGS[name]
        log.warning("c.%s.%s is deprecated: set c.%s.%s instead", section, name, new, name)
        value = config[section].pop(name)
        if isinstance(value, type):  # a dotted name, so supervisors reading the JSON of this config import it
            value = f"{value.__module__}.{value.__qualname__}"
        if value and name not in config[new]:
            config[new][name] = value
    return config


def _configure_sqlite(engine: Engine) -> None:
    """WAL without an fsync per commit, a busy timeout, foreign keys, and transactions we begin ourselves."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:
        # take transaction control from the driver so BEGIN IMMEDIATE is possible
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        if engine.url.database not in (None, "", ":memory:"):
            cursor.execute("PRAGMA journal_mode=WAL")
            # a commit waits for no fsync (the WAL is synced at checkpoints): the database never
            # corrupts, and only a power cut, which also ends every job, can undo the last commits
            cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection) -> None:
        immediate = connection.get_execution_options().get("immediate")
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def _configure_write_lock(engine: Engine) -> None:
    """Start immediate transactions by locking the `ledger_lock` row (PostgreSQL's BEGIN IMMEDIATE).

    A row lock, not SERIALIZABLE: the code that reads then writes was written against
    SQLite's one-writer-at-a-time, and keeps exactly that meaning here; readers and
    ordinary sessions are not blocked. `seed_write_lock` inserts the row.
    """

    @event.listens_for(engine, "begin")
    def _on_begin(connection) -> None:
        if connection.get_execution_options().get("immediate"):
            connection.exec_driver_sql(WRITE_LOCK_SQL)


def database_url(url: str) -> str:
    """Return the URL with PostgreSQL's driver named: `postgresql://` means psycopg 3 here."""
    if url.startswith("postgresql://"):
        return "postgresql+psycopg://" + url.removeprefix("postgresql://")
    return url
