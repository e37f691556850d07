"""deployment metrics: requests, errors and a latency histogram per version and 10 s interval

Revision ID: 0009_deployment_metrics
Revises: 0008_deployment_keys
Create Date: 2026-11-26 12:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_deployment_metrics"
down_revision = "0008_deployment_keys"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "deployment_metrics",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "deployment_id", sa.Integer(), sa.ForeignKey("deployments.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("model_version", sa.String(200), nullable=False),
        sa.Column("start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("requests", sa.Integer(), nullable=False),
        sa.Column("errors", sa.Integer(), nullable=False),
        sa.Column("latency", sa.JSON(), nullable=False),
        sa.UniqueConstraint("deployment_id", "model_version", "start"),
    )
    op.create_index("ix_deployment_metrics_deployment_id", "deployment_metrics", ["deployment_id"])


def downgrade() -> None:
    op.drop_index("ix_deployment_metrics_deployment_id", table_name="deployment_metrics")
    op.drop_table("deployment_metrics")
