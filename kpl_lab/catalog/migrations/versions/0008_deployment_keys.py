"""deployment API keys: callers outside JupyterLab predict with one deployment

Revision ID: 0008_deployment_keys
Revises: 0007_model_aliases
Create Date: 2026-11-26 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_deployment_keys"
down_revision = "0007_model_aliases"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "deployment_keys",
        sa.Column("id", sa.String(20), primary_key=True),
        sa.Column(
            "deployment_id", sa.Integer(), sa.ForeignKey("deployments.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("digest", sa.String(64), nullable=False, unique=True),
        sa.Column("prefix", sa.String(20), nullable=False),
        sa.Column("user", sa.String(200), nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_deployment_keys_deployment_id", "deployment_keys", ["deployment_id"])


def downgrade() -> None:
    op.drop_index("ix_deployment_keys_deployment_id", table_name="deployment_keys")
    op.drop_table("deployment_keys")
