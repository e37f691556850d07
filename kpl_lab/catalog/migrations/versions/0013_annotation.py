"""annotation: labelling tasks, labels, their history, pre-labelling runs and their suggestions

Revision ID: 0013_annotation
Revises: 0012_operations
Create Date: 2026-11-30 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_annotation"
down_revision = "0012_operations"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "annotation_tasks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("dataset_version_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("label_schema", sa.JSON(), nullable=False),
        sa.Column("parts", sa.JSON(), nullable=False),
        sa.Column("record_count", sa.BigInteger(), nullable=False),
        sa.Column("content_field", sa.String(200), nullable=False),
        sa.Column("assignees", sa.JSON(), nullable=False),
        sa.Column("reviewers", sa.JSON(), nullable=False),
        sa.Column("created_by", sa.String(200), nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["dataset_version_id"], ["dataset_versions.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("project_id", "name"),
    )
    op.create_index("ix_annotation_tasks_project_id", "annotation_tasks", ["project_id"])
    op.create_index("ix_annotation_tasks_dataset_version_id", "annotation_tasks", ["dataset_version_id"])
    op.create_table(
        "annotation_labels",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("record", sa.BigInteger(), nullable=False),
        sa.Column("value", sa.JSON(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("dropped", sa.Boolean(), nullable=False),
        sa.Column("annotator", sa.String(200), nullable=False),
        sa.Column("saved", sa.DateTime(timezone=True), nullable=False),
        sa.Column("suggestion_run", sa.Integer(), nullable=True),
        sa.Column("reviewer", sa.String(200), nullable=False),
        sa.Column("comment", sa.Text(), nullable=False),
        sa.Column("reviewed", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["task_id"], ["annotation_tasks.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("task_id", "record"),
    )
    op.create_index("ix_annotation_labels_task_state", "annotation_labels", ["task_id", "state"])
    op.create_table(
        "annotation_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("record", sa.BigInteger(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("user", sa.String(200), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("value", sa.JSON(), nullable=True),
        sa.Column("comment", sa.Text(), nullable=False),
        sa.Column("suggestion_run", sa.Integer(), nullable=True),
        sa.Column("suggestion_model", sa.String(300), nullable=False),
        sa.Column("suggestion_score", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["task_id"], ["annotation_tasks.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_annotation_events_task_record", "annotation_events", ["task_id", "record"])
    op.create_table(
        "annotation_suggestions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("record", sa.BigInteger(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("value", sa.JSON(), nullable=False),
        sa.Column("score", sa.Float(), nullable=True),
        sa.Column("uncertainty", sa.Float(), nullable=False),
        sa.Column("model_version", sa.String(300), nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["task_id"], ["annotation_tasks.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("task_id", "record"),
    )
    op.create_index(
        "ix_annotation_suggestions_task_uncertainty", "annotation_suggestions", ["task_id", "uncertainty"]
    )
    op.create_table(
        "annotation_prelabel_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("deployment", sa.String(100), nullable=False),
        sa.Column("user", sa.String(200), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("total", sa.BigInteger(), nullable=False),
        sa.Column("done", sa.BigInteger(), nullable=False),
        sa.Column("failed", sa.BigInteger(), nullable=False),
        sa.Column("stop_requested", sa.Boolean(), nullable=False),
        sa.Column("lease_until", sa.Float(), nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["task_id"], ["annotation_tasks.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_annotation_prelabel_runs_task_id", "annotation_prelabel_runs", ["task_id"])


def downgrade() -> None:
    op.drop_table("annotation_prelabel_runs")
    op.drop_table("annotation_suggestions")
    op.drop_table("annotation_events")
    op.drop_table("annotation_labels")
    op.drop_table("annotation_tasks")
