"""Catalog tables: projects and the versioned datasets, models and algorithms they hold.

A version row is metadata only: its files live under the storage root at `path`
(relative to the root, so the root can move). Versions are immutable; `version` is
a short content hash, so adding the same content twice gives the same version.
"""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import JSON, BigInteger, DateTime, ForeignKey, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from .db import Base


def utcnow() -> datetime:
    """Return the current time in UTC."""
    return datetime.now(timezone.utc)


class Project(Base):
    """A group of people sharing datasets, models, algorithms and jobs; the unit of isolation."""

    __tablename__ = "projects"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    description: Mapped[str] = mapped_column(Text, default="")
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class _Named:
    """Columns of a named, versioned object of one project."""

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(100))
    description: Mapped[str] = mapped_column(Text, default="")
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class _Version:
    """Columns of one immutable version of a dataset, model or algorithm."""

    id: Mapped[int] = mapped_column(primary_key=True)
    version: Mapped[str] = mapped_column(String(64))
    path: Mapped[str] = mapped_column(String(1000))  # relative to the storage root
    description: Mapped[str] = mapped_column(Text, default="")
    size_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    # where it came from: {"job_id", "algorithm", "function", "inputs", "parameters"}
    lineage: Mapped[dict | None] = mapped_column(JSON, default=None)
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Dataset(_Named, Base):
    """A named dataset of a project."""

    __tablename__ = "datasets"
    __table_args__ = (UniqueConstraint("project_id", "name"),)

    project: Mapped[Project] = relationship()
    versions: Mapped[list[DatasetVersion]] = relationship(
        back_populates="dataset", order_by="DatasetVersion.id", cascade="all, delete-orphan", lazy="selectin"
    )


class DatasetVersion(_Version, Base):
    """One immutable version of a dataset: a kpl-dataset folder in storage."""

    __tablename__ = "dataset_versions"
    __table_args__ = (UniqueConstraint("dataset_id", "version"),)

    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"), index=True)
    record_count: Mapped[int] = mapped_column(BigInteger, default=0)
    parts: Mapped[dict] = mapped_column(JSON, default=dict)  # part name -> record count

    dataset: Mapped[Dataset] = relationship(back_populates="versions", lazy="joined")

    @property
    def ref(self) -> str:
        """Return `NAME:VERSION`, the reference that pins this version."""
        return f"{self.dataset.name}:{self.version}"


class Model(_Named, Base):
    """A named model of a project."""

    __tablename__ = "models"
    __table_args__ = (UniqueConstraint("project_id", "name"),)

    project: Mapped[Project] = relationship()
    versions: Mapped[list[ModelVersion]] = relationship(
        back_populates="model", order_by="ModelVersion.id", cascade="all, delete-orphan", lazy="selectin"
    )
    aliases: Mapped[list[ModelAlias]] = relationship(
        order_by="ModelAlias.alias", cascade="all, delete-orphan", lazy="selectin"
    )


class ModelVersion(_Version, Base):
    """One immutable version of a model: a folder of files in storage."""

    __tablename__ = "model_versions"
    __table_args__ = (UniqueConstraint("model_id", "version"),)

    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"), index=True)
    files: Mapped[list] = mapped_column(JSON, default=list)  # relative paths, for the structure view

    model: Mapped[Model] = relationship(back_populates="versions", lazy="joined")

    @property
    def ref(self) -> str:
        """Return `NAME:VERSION`, the reference that pins this version."""
        return f"{self.model.name}:{self.version}"


class ModelAlias(Base):
    """A movable name (`production`, `canary`, any other) for one version of a model: `NAME@ALIAS`."""

    __tablename__ = "model_aliases"
    __table_args__ = (UniqueConstraint("model_id", "alias"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"), index=True)
    alias: Mapped[str] = mapped_column(String(100))
    model_version_id: Mapped[int] = mapped_column(
        ForeignKey("model_versions.id", ondelete="CASCADE"), index=True
    )
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    model_version: Mapped[ModelVersion] = relationship(lazy="joined")


class Algorithm(_Named, Base):
    """A named algorithm of a project."""

    __tablename__ = "algorithms"
    __table_args__ = (UniqueConstraint("project_id", "name"),)

    project: Mapped[Project] = relationship()
    versions: Mapped[list[AlgorithmVersion]] = relationship(
        back_populates="algorithm",
        order_by="AlgorithmVersion.id",
        cascade="all, delete-orphan",
        lazy="selectin",
    )


class AlgorithmVersion(_Version, Base):
    """One immutable version of an algorithm: its code folder with environment.yml."""

    __tablename__ = "algorithm_versions"
    __table_args__ = (UniqueConstraint("algorithm_id", "version"),)

    algorithm_id: Mapped[int] = mapped_column(ForeignKey("algorithms.id", ondelete="CASCADE"), index=True)
    functions: Mapped[list] = mapped_column(JSON, default=list)  # e.g. ["train", "test", "infer"]
    parameters: Mapped[dict] = mapped_column(JSON, default=dict)  # parameter.yml defaults

    algorithm: Mapped[Algorithm] = relationship(back_populates="versions", lazy="joined")

    @property
    def ref(self) -> str:
        """Return `NAME:VERSION`, the reference that pins this version."""
        return f"{self.algorithm.name}:{self.version}"
