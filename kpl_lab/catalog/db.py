"""The database: one SQLAlchemy metadata for every catalog table, SQLite by default."""

from __future__ import annotations

from sqlalchemy.orm import DeclarativeBase


class Base(DeclarativeBase):
    """Base class of every table (catalog, jobs, ledger)."""
