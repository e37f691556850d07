"""Job tables: jobs, their metric points, and the resource ledger (reservations).

The ledger is shared with notebooks: a reservation is owned by a job or a notebook,
so it names its project by name and never points at the jobs table.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from ..api.choices import FINAL_STATES, JobState
from .db import Base
from .models import AlgorithmVersion, Project, utcnow

# SQLite only auto-increments an INTEGER PRIMARY KEY
_BigId = BigInteger().with_variant(Integer, "sqlite")


class Job(Base):
    """One run of one function of one algorithm version, from queued to a final state."""

    __tablename__ = "jobs"
    __table_args__ = (Index("ix_jobs_project_state", "project_id", "state"),)

    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    algorithm_version_id: Mapped[int | None] = mapped_column(
        ForeignKey("algorithm_versions.id", ondelete="SET NULL"), nullable=True
    )
    algorithm_ref: Mapped[str] = mapped_column(String(200), default="")  # NAME:VERSION, kept if deleted
    function: Mapped[str] = mapped_column(String(20))
    user: Mapped[str] = mapped_column(String(200), default="")  # the hub user it runs as ("": the platform's)
    state: Mapped[str] = mapped_column(String(16), default=JobState.queued.value, index=True)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    # key -> {"ref": what was asked, "kind": "dataset"|"model", "version_id": int, "version": "NAME:VER"}
    inputs: Mapped[dict] = mapped_column(JSON, default=dict)
    parameters: Mapped[dict] = mapped_column(JSON, default=dict)
    # key -> {"name": catalog name, "registered": "dataset:NAME:VER" | "model:NAME:VER" | None}
    outputs: Mapped[dict] = mapped_column(JSON, default=dict)
    limits: Mapped[dict] = mapped_column(JSON, default=dict)  # launch.Resources as a dict
    requests: Mapped[dict | None] = mapped_column(JSON, default=None)
    assigned_devices: Mapped[dict] = mapped_column(JSON, default=dict)  # kind -> [index, ...]
    executor: Mapped[str] = mapped_column(String(20), default="local")
    enforcement: Mapped[str] = mapped_column(String(200), default="")
    handle: Mapped[dict] = mapped_column(JSON, default=dict)  # executor handle: pids, start times
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    reason: Mapped[str] = mapped_column(Text, default="")
    last_log_lines: Mapped[str] = mapped_column(Text, default="")
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    progress_time: Mapped[float | None] = mapped_column(Float, nullable=True)  # Unix time of last progress
    eta_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)  # as of progress_time
    figures: Mapped[dict] = mapped_column(JSON, default=dict)  # title -> figure event fields
    results: Mapped[list] = mapped_column(JSON, default=list)  # result events
    saves: Mapped[list] = mapped_column(JSON, default=list)  # save events
    # resource use sampled while it runs: {"latest": sample, "peak_memory_mb": MB, "history": [sample, ...]}
    usage: Mapped[dict] = mapped_column(JSON, default=dict)
    events_offset: Mapped[int] = mapped_column(BigInteger, default=0)  # bytes of events.jsonl ingested
    events_invalid: Mapped[int] = mapped_column(Integer, default=0)  # lines that were not valid JSON
    stop_requested: Mapped[bool] = mapped_column(default=False)
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)
    started: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finished: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    copied_from: Mapped[str | None] = mapped_column(String(16), nullable=True)
    resumed_from: Mapped[str | None] = mapped_column(String(16), nullable=True)
    experiment: Mapped[str | None] = mapped_column(String(100), nullable=True)  # name, when a trial
    trial: Mapped[int | None] = mapped_column(Integer, nullable=True)  # its trial number

    project: Mapped[Project] = relationship()
    algorithm_version: Mapped[AlgorithmVersion | None] = relationship()

    @property
    def is_final(self) -> bool:
        """Return whether the job has ended."""
        return self.state in FINAL_STATES


class Metric(Base):
    """One point of one series of one metric figure of a job."""

    __tablename__ = "metrics"
    __table_args__ = (Index("ix_metrics_job_series_step", "job_id", "series", "step"),)

    id: Mapped[int] = mapped_column(_BigId, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    figure: Mapped[str] = mapped_column(String(200))
    series: Mapped[str] = mapped_column(String(200))
    step: Mapped[int] = mapped_column(BigInteger)  # ordinal of the point in its series
    x: Mapped[float] = mapped_column(Float)
    value: Mapped[float] = mapped_column(Float)
    time: Mapped[float] = mapped_column(Float)


class Reservation(Base):
    """Resources held by one running job or notebook, with the device indexes it was given."""

    __tablename__ = "reservations"
    __table_args__ = (UniqueConstraint("owner_kind", "owner_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    project: Mapped[str] = mapped_column(String(100), index=True)
    owner_kind: Mapped[str] = mapped_column(String(20))  # job | notebook
    owner_id: Mapped[str] = mapped_column(String(100))
    cpu: Mapped[float] = mapped_column(Float)
    memory: Mapped[int] = mapped_column(Integer)  # MB
    devices: Mapped[dict] = mapped_column(JSON, default=dict)  # kind -> [index, ...]
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class LedgerLock(Base):
    """The single row an immediate transaction locks first on PostgreSQL, so reservations never race."""

    __tablename__ = "ledger_lock"

    id: Mapped[int] = mapped_column(primary_key=True)
    generation: Mapped[int] = mapped_column(BigInteger, default=0)
