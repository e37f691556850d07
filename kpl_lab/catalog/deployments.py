"""Deployment tables: a deployment, the replica processes that serve it, its API keys and metrics.

A deployment serves a production model version and optionally a canary version with a
weight (percent of requests). A replica serves one model version; it serves production
or canary traffic by matching the deployment's versions, so a promote only swaps ids.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, DateTime, ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from .db import Base
from .models import AlgorithmVersion, ModelVersion, Project, utcnow


class Deployment(Base):
    """A named HTTP API of a project: model versions served by supervised replicas."""

    __tablename__ = "deployments"
    __table_args__ = (UniqueConstraint("project_id", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(100))
    replicas: Mapped[int] = mapped_column(Integer, default=1)
    model_version_id: Mapped[int | None] = mapped_column(
        ForeignKey("model_versions.id", ondelete="SET NULL"), nullable=True
    )
    algorithm_version_id: Mapped[int | None] = mapped_column(
        ForeignKey("algorithm_versions.id", ondelete="SET NULL"), nullable=True
    )
    canary_model_version_id: Mapped[int | None] = mapped_column(
        ForeignKey("model_versions.id", ondelete="SET NULL"), nullable=True
    )
    canary_algorithm_version_id: Mapped[int | None] = mapped_column(
        ForeignKey("algorithm_versions.id", ondelete="SET NULL"), nullable=True
    )
    canary_weight: Mapped[int] = mapped_column(Integer, default=0)  # percent of requests
    sticky_header: Mapped[str] = mapped_column(String(100), default="")  # caller header pinning a version
    user: Mapped[str] = mapped_column(String(200), default="")
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    project: Mapped[Project] = relationship()
    model_version: Mapped[ModelVersion | None] = relationship(foreign_keys=[model_version_id])
    algorithm_version: Mapped[AlgorithmVersion | None] = relationship(foreign_keys=[algorithm_version_id])
    canary_model_version: Mapped[ModelVersion | None] = relationship(foreign_keys=[canary_model_version_id])
    canary_algorithm_version: Mapped[AlgorithmVersion | None] = relationship(
        foreign_keys=[canary_algorithm_version_id]
    )
    replica_rows: Mapped[list[Replica]] = relationship(
        back_populates="deployment", order_by="Replica.id", cascade="all, delete-orphan", lazy="selectin"
    )
    key_rows: Mapped[list[DeploymentKey]] = relationship(
        back_populates="deployment", order_by="DeploymentKey.created", cascade="all, delete-orphan"
    )


class Replica(Base):
    """One server process of a deployment, owned by a detached supervisor (`kpl_lab.serving.replica`)."""

    __tablename__ = "deployment_replicas"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)  # also the ledger owner id
    deployment_id: Mapped[int] = mapped_column(ForeignKey("deployments.id", ondelete="CASCADE"), index=True)
    model_version_id: Mapped[int | None] = mapped_column(
        ForeignKey("model_versions.id", ondelete="SET NULL"), nullable=True
    )
    model_ref: Mapped[str] = mapped_column(String(200))  # NAME:VERSION, the version it serves
    run_dir: Mapped[str] = mapped_column(String(1000))
    handle: Mapped[dict] = mapped_column(JSON, default=dict)  # supervisor pid and start time
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    deployment: Mapped[Deployment] = relationship(back_populates="replica_rows")


class DeploymentKey(Base):
    """An API key that lets a caller outside JupyterLab predict with one deployment, and nothing else."""

    __tablename__ = "deployment_keys"

    id: Mapped[str] = mapped_column(
        String(20), primary_key=True
    )  # shown in `key list`, named by `key revoke`
    deployment_id: Mapped[int] = mapped_column(ForeignKey("deployments.id", ondelete="CASCADE"), index=True)
    digest: Mapped[str] = mapped_column(String(64), unique=True)  # sha256 hex of the key; the key is not kept
    prefix: Mapped[str] = mapped_column(String(20))  # the key's first characters, to tell keys apart
    user: Mapped[str] = mapped_column(String(200), default="")
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    deployment: Mapped[Deployment] = relationship(back_populates="key_rows")


class DeploymentMetrics(Base):
    """Requests one model version of a deployment answered in one interval, as the gateway saw them."""

    __tablename__ = "deployment_metrics"
    __table_args__ = (UniqueConstraint("deployment_id", "model_version", "start"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    deployment_id: Mapped[int] = mapped_column(ForeignKey("deployments.id", ondelete="CASCADE"), index=True)
    model_version: Mapped[str] = mapped_column(String(200))  # NAME:VERSION
    start: Mapped[datetime] = mapped_column(DateTime(timezone=True))  # the interval's start, UTC
    requests: Mapped[int] = mapped_column(Integer)
    errors: Mapped[int] = mapped_column(Integer)
    latency: Mapped[dict] = mapped_column(JSON)  # histogram bin -> requests (kpl_lab.serving.history)
