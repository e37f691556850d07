"""model aliases: movable names for model versions

Revision ID: 0007_model_aliases
Revises: 0006_experiments
Create Date: 2026-11-26 06:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_model_aliases"
down_revision = "0006_experiments"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "model_aliases",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("model_id", sa.Integer(), sa.ForeignKey("models.id", ondelete="CASCADE"), nullable=False),
        sa.Column("alias", sa.String(100), nullable=False),
        sa.Column(
            "model_version_id",
            sa.Integer(),
            sa.ForeignKey("model_versions.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("model_id", "alias"),
    )
    op.create_index("ix_model_aliases_model_id", "model_aliases", ["model_id"])
    op.create_index("ix_model_aliases_model_version_id", "model_aliases", ["model_version_id"])


def downgrade() -> None:
    op.drop_table("model_aliases")
