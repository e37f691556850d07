"""Annotation tables: labelling tasks on a dataset version, their labels, each label's history,
the suggestions of pre-labelling runs, and those runs.

A task's records are numbered 0..N-1 across its parts in reading order; a label, a suggestion
and an event name their record by that number. Only records someone touched have rows, so a
task on a million records costs nothing until it is labelled.
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

from .db import Base
from .models import DatasetVersion, Project, utcnow

LABEL_STATES = ("labelled", "accepted", "rejected")
RUN_STATES = ("running", "succeeded", "failed", "stopped")


class AnnotationTask(Base):
    """A labelling task: which records of which dataset version, of what kind, with which classes, by whom."""

    __tablename__ = "annotation_tasks"
    __table_args__ = (UniqueConstraint("project_id", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(100))
    description: Mapped[str] = mapped_column(Text, default="")
    dataset_version_id: Mapped[int] = mapped_column(ForeignKey("dataset_versions.id"), index=True)
    kind: Mapped[str] = mapped_column(String(20))  # see api.annotation.TaskKind
    label_schema: Mapped[dict] = mapped_column(JSON, default=dict)  # classes, keypoints, skeleton
    parts: Mapped[list] = mapped_column(
        JSON, default=list
    )  # [[part, records labelled from it], ...] in order
    record_count: Mapped[int] = mapped_column(BigInteger, default=0)
    content_field: Mapped[str] = mapped_column(String(200), default="content")
    assignees: Mapped[list] = mapped_column(JSON, default=list)  # record r goes to assignees[r % n]
    reviewers: Mapped[list] = mapped_column(JSON, default=list)
    created_by: Mapped[str] = mapped_column(String(200), default="")
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    project: Mapped[Project] = relationship(lazy="joined")
    dataset_version: Mapped[DatasetVersion] = relationship(lazy="joined")


class AnnotationLabel(Base):
    """The label of one record now: its value, version, who saved it and what review said."""

    __tablename__ = "annotation_labels"
    __table_args__ = (
        UniqueConstraint("task_id", "record"),
        Index("ix_annotation_labels_task_state", "task_id", "state"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("annotation_tasks.id", ondelete="CASCADE"))
    record: Mapped[int] = mapped_column(BigInteger)
    value: Mapped[dict] = mapped_column(JSON, default=dict)
    version: Mapped[int] = mapped_column(Integer, default=1)  # one more at every save and review
    state: Mapped[str] = mapped_column(String(16), default="labelled")
    dropped: Mapped[bool] = mapped_column(default=False)  # marked for removal: never published
    annotator: Mapped[str] = mapped_column(String(200), default="")
    saved: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    suggestion_run: Mapped[int | None] = mapped_column(Integer, nullable=True)  # the run it was accepted from
    reviewer: Mapped[str] = mapped_column(String(200), default="")
    comment: Mapped[str] = mapped_column(Text, default="")
    reviewed: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class AnnotationEvent(Base):
    """One step of a label's history: a save, an import, an acceptance or a rejection."""

    __tablename__ = "annotation_events"
    __table_args__ = (Index("ix_annotation_events_task_record", "task_id", "record"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("annotation_tasks.id", ondelete="CASCADE"))
    record: Mapped[int] = mapped_column(BigInteger)
    version: Mapped[int] = mapped_column(Integer)  # the label's version after this step
    action: Mapped[str] = mapped_column(String(16))  # saved, imported, accepted, rejected
    user: Mapped[str] = mapped_column(String(200), default="")
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    value: Mapped[dict | None] = mapped_column(JSON, nullable=True)  # the value saved (saves and imports)
    comment: Mapped[str] = mapped_column(Text, default="")
    # the suggestion the value came from: its run, the model version that made it and its score
    suggestion_run: Mapped[int | None] = mapped_column(Integer, nullable=True)
    suggestion_model: Mapped[str] = mapped_column(String(300), default="")
    suggestion_score: Mapped[float | None] = mapped_column(Float, nullable=True)


class AnnotationSuggestion(Base):
    """A deployment's answer for one record, as a label value with its score (the newest run's)."""

    __tablename__ = "annotation_suggestions"
    __table_args__ = (
        UniqueConstraint("task_id", "record"),
        Index("ix_annotation_suggestions_task_uncertainty", "task_id", "uncertainty"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("annotation_tasks.id", ondelete="CASCADE"))
    record: Mapped[int] = mapped_column(BigInteger)
    run_id: Mapped[int] = mapped_column(Integer)
    value: Mapped[dict] = mapped_column(JSON, default=dict)
    score: Mapped[float | None] = mapped_column(Float, nullable=True)
    uncertainty: Mapped[float] = mapped_column(Float, default=0.0)  # 1 - score: the least certain first
    model_version: Mapped[str] = mapped_column(String(300), default="")
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class AnnotationPrelabelRun(Base):
    """A run of a deployment over a task's unlabelled records, whose answers become suggestions."""

    __tablename__ = "annotation_prelabel_runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("annotation_tasks.id", ondelete="CASCADE"), index=True)
    deployment: Mapped[str] = mapped_column(String(100))
    user: Mapped[str] = mapped_column(String(200), default="")
    state: Mapped[str] = mapped_column(String(16), default="running")
    reason: Mapped[str] = mapped_column(Text, default="")
    total: Mapped[int] = mapped_column(BigInteger, default=0)
    done: Mapped[int] = mapped_column(BigInteger, default=0)
    failed: Mapped[int] = mapped_column(BigInteger, default=0)
    stop_requested: Mapped[bool] = mapped_column(default=False)
    # the process running it renews this lease as it goes; a lapsed lease means that process is gone
    lease_until: Mapped[float] = mapped_column(Float, default=0.0)
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
