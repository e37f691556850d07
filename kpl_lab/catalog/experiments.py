"""Experiment tables: a hyperparameter search and its trials, each trial one job.

Optuna keeps its own study, trial and parameter tables in the same database (created by
migration 0006_experiments); these tables tie a study to a project, an algorithm and jobs.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, DateTime, Float, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from .db import Base
from .models import Project, utcnow


class Experiment(Base):
    """A search over the parameters of one algorithm function for the best value of one metric."""

    __tablename__ = "experiments"
    __table_args__ = (UniqueConstraint("project_id", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(100))
    user: Mapped[str] = mapped_column(String(200), default="")  # the hub user its trials run as
    algorithm_ref: Mapped[str] = mapped_column(String(200))  # NAME:VERSION, pinned at creation
    function: Mapped[str] = mapped_column(String(20))
    inputs: Mapped[dict] = mapped_column(JSON, default=dict)  # input key -> ref, as for a job
    parameters: Mapped[dict] = mapped_column(JSON, default=dict)  # fixed parameters of every trial
    resources: Mapped[dict | None] = mapped_column(JSON, default=None)  # job resource overrides
    space: Mapped[dict] = mapped_column(JSON, default=dict)  # parameter -> range or choices
    objective: Mapped[dict] = mapped_column(JSON, default=dict)  # {"metric", "direction"}
    budget: Mapped[dict] = mapped_column(JSON, default=dict)  # {"trials", "seconds"}
    parallelism: Mapped[int] = mapped_column(Integer, default=1)
    sampler: Mapped[dict] = mapped_column(JSON, default=dict)  # {"name", "seed"}
    pruner: Mapped[dict | None] = mapped_column(JSON, default=None)  # {"name", ...} or none
    warnings: Mapped[list] = mapped_column(JSON, default=list)  # found when it was checked
    study_name: Mapped[str] = mapped_column(String(300), unique=True)
    state: Mapped[str] = mapped_column(String(16), default="running", index=True)
    reason: Mapped[str] = mapped_column(Text, default="")
    # the process driving it holds a lease it renews each round; another takes over once it lapses
    driver: Mapped[str] = mapped_column(String(200), default="")
    lease_until: Mapped[float] = mapped_column(Float, default=0.0)  # Unix time
    seconds_before: Mapped[float] = mapped_column(Float, default=0.0)  # time run before the last resume
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    resumed: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)

    project: Mapped[Project] = relationship()
    trials: Mapped[list[ExperimentTrial]] = relationship(
        back_populates="experiment",
        order_by="ExperimentTrial.number",
        cascade="all, delete-orphan",
        lazy="selectin",
    )


class ExperimentTrial(Base):
    """One trial of an experiment: the parameters Optuna chose and the job that tried them."""

    __tablename__ = "experiment_trials"
    __table_args__ = (UniqueConstraint("experiment_id", "number"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    experiment_id: Mapped[int] = mapped_column(ForeignKey("experiments.id", ondelete="CASCADE"), index=True)
    number: Mapped[int] = mapped_column(Integer)  # Optuna's trial number
    trial_id: Mapped[int] = mapped_column(Integer)  # Optuna's trial id
    job_id: Mapped[str] = mapped_column(String(16), index=True)
    state: Mapped[str] = mapped_column(String(16), default="running")  # see api.experiments.TrialState
    params: Mapped[dict] = mapped_column(JSON, default=dict)
    value: Mapped[float | None] = mapped_column(Float, nullable=True)
    reported: Mapped[int] = mapped_column(Integer, default=0)  # metric points reported to Optuna
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)

    experiment: Mapped[Experiment] = relationship(back_populates="trials", lazy="joined")
