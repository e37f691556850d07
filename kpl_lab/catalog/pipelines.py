"""Pipeline run tables: one row per run of a pipeline file, one per node of that run."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, BigInteger, DateTime, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from .db import Base
from .models import Project, utcnow

RUN_STATES = ("running", "succeeded", "failed", "stopped")
NODE_STATES = ("pending", "running", "succeeded", "cached", "failed", "skipped", "stopped")


class PipelineRun(Base):
    """One run of a pipeline file, with the file as it was run."""

    __tablename__ = "pipeline_runs"
    __table_args__ = (Index("ix_pipeline_runs_project_created", "project_id", "created"),)

    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    file: Mapped[str] = mapped_column(Text)  # the YAML that ran
    # the pipeline as checked when the run was recorded: what it runs (pipelines.validate.Validation.to_record)
    checked: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    path: Mapped[str] = mapped_column(String(1000), default="")  # where the file was read from
    user: Mapped[str] = mapped_column(String(200), default="")
    state: Mapped[str] = mapped_column(String(16), default="running", index=True)
    reason: Mapped[str] = mapped_column(Text, default="")
    from_node: Mapped[str | None] = mapped_column(String(200), nullable=True)  # re-run from this node
    fresh: Mapped[bool] = mapped_column(default=False)  # re-run all: no cache used
    stop_requested: Mapped[bool] = mapped_column(default=False)
    pid: Mapped[int | None] = mapped_column(Integer, nullable=True)  # the process executing it
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)

    project: Mapped[Project] = relationship(lazy="joined")
    nodes: Mapped[list[PipelineNodeRun]] = relationship(
        back_populates="run", order_by="PipelineNodeRun.id", cascade="all, delete-orphan", lazy="selectin"
    )


class PipelineNodeRun(Base):
    """One node of a run: state, times, rows, log and where its output is."""

    __tablename__ = "pipeline_node_runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("pipeline_runs.id", ondelete="CASCADE"), index=True)
    node: Mapped[str] = mapped_column(String(200))
    type: Mapped[str] = mapped_column(String(40))
    state: Mapped[str] = mapped_column(String(16), default="pending")
    cache_key: Mapped[str] = mapped_column(String(64), default="")
    started: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finished: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    rows_in: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    rows_out: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    log: Mapped[str] = mapped_column(Text, default="")
    # port -> {"path": folder relative to the storage root, "ref": "dataset:NAME:VER" | "model:…" | None, "rows"}
    outputs: Mapped[dict] = mapped_column(JSON, default=dict)
    job_id: Mapped[str | None] = mapped_column(String(16), nullable=True)

    run: Mapped[PipelineRun] = relationship(back_populates="nodes")

    @property
    def cached(self) -> bool:
        """Return whether the node's result came from the cache."""
        return self.state == "cached"
