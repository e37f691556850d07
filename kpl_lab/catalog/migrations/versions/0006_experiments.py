"""experiments, their trials, the experiment and trial of a job, and Optuna's study tables

Optuna's tables (studies, trials, trial_params, ...) are created here from the installed
Optuna's own metadata, so one Alembic history (ours) owns the whole schema: Optuna's
own Alembic would stamp `alembic_version`, the table our revisions live in, so the
platform opens Optuna's storage with `skip_table_creation` and `skip_compatibility_check`.

Revision ID: 0006_experiments
Revises: 0003
Create Date: 2026-11-26 05:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_experiments"
down_revision = "0005_deployments"
branch_labels = None
depends_on = None


def _optuna_metadata() -> sa.MetaData:
    from optuna.storages._rdb.models import BaseModel

    return BaseModel.metadata


def upgrade() -> None:
    op.create_table(
        "experiments",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("user", sa.String(200), nullable=False),
        sa.Column("algorithm_ref", sa.String(200), nullable=False),
        sa.Column("function", sa.String(20), nullable=False),
        sa.Column("inputs", sa.JSON(), nullable=False),
        sa.Column("parameters", sa.JSON(), nullable=False),
        sa.Column("resources", sa.JSON(), nullable=True),
        sa.Column("space", sa.JSON(), nullable=False),
        sa.Column("objective", sa.JSON(), nullable=False),
        sa.Column("budget", sa.JSON(), nullable=False),
        sa.Column("parallelism", sa.Integer(), nullable=False),
        sa.Column("sampler", sa.JSON(), nullable=False),
        sa.Column("pruner", sa.JSON(), nullable=True),
        sa.Column("warnings", sa.JSON(), nullable=False),
        sa.Column("study_name", sa.String(300), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("driver", sa.String(200), nullable=False),
        sa.Column("lease_until", sa.Float(), nullable=False),
        sa.Column("seconds_before", sa.Float(), nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.Column("resumed", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("project_id", "name"),
        sa.UniqueConstraint("study_name"),
    )
    op.create_index("ix_experiments_project_id", "experiments", ["project_id"])
    op.create_index("ix_experiments_state", "experiments", ["state"])
    op.create_table(
        "experiment_trials",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("reported", sa.Integer(), nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiments.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("experiment_id", "number"),
    )
    op.create_index("ix_experiment_trials_experiment_id", "experiment_trials", ["experiment_id"])
    op.create_index("ix_experiment_trials_job_id", "experiment_trials", ["job_id"])
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("experiment", sa.String(100), nullable=True))
        batch_op.add_column(sa.Column("trial", sa.Integer(), nullable=True))
    _optuna_metadata().create_all(op.get_bind())


def downgrade() -> None:
    _optuna_metadata().drop_all(op.get_bind())
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("trial")
        batch_op.drop_column("experiment")
    op.drop_index("ix_experiment_trials_job_id", table_name="experiment_trials")
    op.drop_index("ix_experiment_trials_experiment_id", table_name="experiment_trials")
    op.drop_table("experiment_trials")
    op.drop_index("ix_experiments_state", table_name="experiments")
    op.drop_index("ix_experiments_project_id", table_name="experiments")
    op.drop_table("experiments")
