"""Bring the database schema to the newest Alembic revision (run on first use)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine

MIGRATIONS = Path(__file__).parent / "migrations"


def alembic_config(connection: Connection | None = None) -> Config:
    """Return the Alembic configuration of the catalog (no alembic.ini needed)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str | None:
    """Return the newest revision shipped with this version of KPL Lab."""
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(connection: Connection) -> str | None:
    """Return the revision the database is at (None for an empty database)."""
    return MigrationContext.configure(connection).get_current_revision()


def upgrade(engine: Engine) -> None:
    """Upgrade the schema to head; concurrent processes wait for one another."""
    head = head_revision()
    with engine.connect() as connection:
        if current_revision(connection) == head:
            return
    # on SQLite this transaction holds the write lock from its first statement
    with engine.connect().execution_options(sqlite_immediate=True) as connection, connection.begin():
        if current_revision(connection) != head:
            command.upgrade(alembic_config(connection), "head")
