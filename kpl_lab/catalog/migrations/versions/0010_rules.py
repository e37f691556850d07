"""rules: quotas, capacity, defaults and profiles the platform decides with, read at each decision

Revision ID: 0010_rules
Revises: 0009_deployment_metrics
Create Date: 2026-11-29 00:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_rules"
down_revision = "0009_deployment_metrics"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rules",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("kind", sa.String(40), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("value", sa.JSON(), nullable=True),
        sa.Column("loaded", sa.String(64), nullable=False, server_default=""),
        sa.Column("updated", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("kind", "name"),
    )


def downgrade() -> None:
    op.drop_table("rules")
