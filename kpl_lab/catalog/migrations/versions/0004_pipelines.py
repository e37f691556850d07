"""pipeline runs and their nodes

Revision ID: 0004_pipelines
Revises: 0003
Create Date: 2026-11-26 05:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_pipelines"
down_revision = "0003"  # the revision id inside 0003_job_user.py
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pipeline_runs",
        sa.Column("id", sa.String(16), primary_key=True),
        sa.Column(
            "project_id", sa.Integer(), sa.ForeignKey("projects.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("file", sa.Text(), nullable=False),
        sa.Column("path", sa.String(1000), nullable=False),
        sa.Column("user", sa.String(200), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("from_node", sa.String(200), nullable=True),
        sa.Column("fresh", sa.Boolean(), nullable=False),
        sa.Column("stop_requested", sa.Boolean(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_pipeline_runs_project_id", "pipeline_runs", ["project_id"])
    op.create_index("ix_pipeline_runs_state", "pipeline_runs", ["state"])
    op.create_index("ix_pipeline_runs_project_created", "pipeline_runs", ["project_id", "created"])
    op.create_table(
        "pipeline_node_runs",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "run_id", sa.String(16), sa.ForeignKey("pipeline_runs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("node", sa.String(200), nullable=False),
        sa.Column("type", sa.String(40), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("cache_key", sa.String(64), nullable=False),
        sa.Column("started", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished", sa.DateTime(timezone=True), nullable=True),
        sa.Column("rows_in", sa.BigInteger(), nullable=True),
        sa.Column("rows_out", sa.BigInteger(), nullable=True),
        sa.Column("log", sa.Text(), nullable=False),
        sa.Column("outputs", sa.JSON(), nullable=False),
        sa.Column("job_id", sa.String(16), nullable=True),
    )
    op.create_index("ix_pipeline_node_runs_run_id", "pipeline_node_runs", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_pipeline_node_runs_run_id", "pipeline_node_runs")
    op.drop_table("pipeline_node_runs")
    op.drop_index("ix_pipeline_runs_project_created", "pipeline_runs")
    op.drop_index("ix_pipeline_runs_state", "pipeline_runs")
    op.drop_index("ix_pipeline_runs_project_id", "pipeline_runs")
    op.drop_table("pipeline_runs")
