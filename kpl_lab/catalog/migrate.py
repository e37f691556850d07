"""Bring the database schema to the newest Alembic revision (run on first use)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, inspect

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).parent / "migrations"
# the newest revision in migrations/versions (test_migrations checks it against Alembic's)
HEAD = "0013_annotation"
# PostgreSQL: the advisory lock concurrent first uses wait on while one of them creates the schema
UPGRADE_LOCK_KEY = 0x4B504C


def alembic_config(connection: Connection | None = None) -> Config:
    """Return the Alembic configuration of the catalog (no alembic.ini needed)."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str | None:
    """Return the newest revision of the migration scripts, as Alembic finds it."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(connection: Connection) -> str | None:
    """Return the revision the database is at (None for an empty database).

    Read without Alembic: importing it costs every CLI call and platform open 0.2 s, and
    a database at `HEAD` needs nothing else from it.
    """
    if not inspect(connection).has_table("alembic_version"):
        return None
    return connection.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()


def upgrade(engine: Engine) -> None:
    """Upgrade the schema to head; concurrent processes wait for one another."""
    with engine.connect() as connection:
        if current_revision(connection) == HEAD:
            return
    from alembic import command

    sqlite = engine.dialect.name == "sqlite"
    # on SQLite this transaction holds the write lock from its first statement
    with engine.connect().execution_options(immediate=sqlite) as connection, connection.begin():
        if not sqlite:  # no table exists yet to lock a row of
            connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({UPGRADE_LOCK_KEY})")
        if current_revision(connection) != HEAD:
            command.upgrade(alembic_config(connection), "head")


def seed_write_lock(engine: Engine) -> None:
    """Insert the `ledger_lock` row that immediate transactions lock (PostgreSQL; idempotent)."""
    from sqlalchemy.dialects.postgresql import insert

    from .jobs import LedgerLock

    with engine.begin() as connection:
        connection.execute(insert(LedgerLock).values(id=1, generation=0).on_conflict_do_nothing())
