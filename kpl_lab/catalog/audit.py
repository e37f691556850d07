"""The audit table: who did what, when and from where, appended to and never changed.

Rows are written by `kpl_lab.monitoring.audit.AuditLog` only (appended, then dropped once
older than its retention); nothing updates one. Platform data: only administrators read it.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, BigInteger, DateTime, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from .db import Base
from .models import utcnow

_BigId = BigInteger().with_variant(Integer, "sqlite")  # SQLite only auto-increments an INTEGER key


class AuditEvent(Base):
    """One action: a login, a change, an admin's act, or a refused request that looked like an attack."""

    __tablename__ = "audit_events"

    id: Mapped[int] = mapped_column(_BigId, primary_key=True, autoincrement=True)
    time: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)
    user: Mapped[str] = mapped_column(String(200), default="", index=True)  # "" when unknown
    action: Mapped[str] = mapped_column(String(60), index=True)  # e.g. deployment.create, login
    target: Mapped[str] = mapped_column(String(500), default="")  # what it was done to
    project: Mapped[str] = mapped_column(String(100), default="", index=True)
    outcome: Mapped[str] = mapped_column(String(10), default="ok")  # ok | refused
    status: Mapped[int | None] = mapped_column(Integer, nullable=True)  # the HTTP status answered
    client: Mapped[str] = mapped_column(String(100), default="")  # the caller's address
    detail: Mapped[dict] = mapped_column(JSON, default=dict)
