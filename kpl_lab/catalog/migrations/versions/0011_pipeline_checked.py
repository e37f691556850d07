"""pipeline runs keep their checked pipeline: a run is checked once, when it is recorded

Revision ID: 0011_pipeline_checked
Revises: 0010_rules
Create Date: 2026-11-29 01:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_pipeline_checked"
down_revision = "0010_rules"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("pipeline_runs") as batch:
        batch.add_column(sa.Column("checked", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("pipeline_runs") as batch:
        batch.drop_column("checked")
