"""The usage history table: the use of each machine, project and user, sampled once a minute.

Written by `kpl_lab.monitoring.history`, kept for a bounded number of days.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, BigInteger, DateTime, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from .db import Base

_BigId = BigInteger().with_variant(Integer, "sqlite")  # SQLite only auto-increments an INTEGER key


class UsageSample(Base):
    """What one machine, project or user used (and held) at one time."""

    __tablename__ = "usage_samples"
    __table_args__ = (Index("ix_usage_samples_scope_name_time", "scope", "name", "time"),)

    id: Mapped[int] = mapped_column(_BigId, primary_key=True, autoincrement=True)
    time: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    scope: Mapped[str] = mapped_column(String(10))  # machine | project | user
    name: Mapped[str] = mapped_column(String(200))
    # cpu (cores used), memory_mb, gpu (utilization %), npu (%), and what the ledger holds:
    # cpu_reserved, memory_reserved_mb, gpus, npus; a key is left out where it is not known
    use: Mapped[dict] = mapped_column(JSON, default=dict)
