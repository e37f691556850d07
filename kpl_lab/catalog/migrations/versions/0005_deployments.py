"""deployments and their replicas

Revision ID: 0005_deployments
Revises: 0003
Create Date: 2026-11-26 05:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_deployments"
down_revision = "0004_pipelines"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "deployments",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "project_id", sa.Integer(), sa.ForeignKey("projects.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("replicas", sa.Integer(), nullable=False),
        sa.Column(
            "model_version_id",
            sa.Integer(),
            sa.ForeignKey("model_versions.id", ondelete="SET NULL"),
            nullable=True,
        ),
        sa.Column(
            "algorithm_version_id",
            sa.Integer(),
            sa.ForeignKey("algorithm_versions.id", ondelete="SET NULL"),
            nullable=True,
        ),
        sa.Column(
            "canary_model_version_id",
            sa.Integer(),
            sa.ForeignKey("model_versions.id", ondelete="SET NULL"),
            nullable=True,
        ),
        sa.Column(
            "canary_algorithm_version_id",
            sa.Integer(),
            sa.ForeignKey("algorithm_versions.id", ondelete="SET NULL"),
            nullable=True,
        ),
        sa.Column("canary_weight", sa.Integer(), nullable=False),
        sa.Column("sticky_header", sa.String(100), nullable=False),
        sa.Column("user", sa.String(200), nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("project_id", "name"),
    )
    op.create_index("ix_deployments_project_id", "deployments", ["project_id"])
    op.create_table(
        "deployment_replicas",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column(
            "deployment_id", sa.Integer(), sa.ForeignKey("deployments.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column(
            "model_version_id",
            sa.Integer(),
            sa.ForeignKey("model_versions.id", ondelete="SET NULL"),
            nullable=True,
        ),
        sa.Column("model_ref", sa.String(200), nullable=False),
        sa.Column("run_dir", sa.String(1000), nullable=False),
        sa.Column("handle", sa.JSON(), nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_deployment_replicas_deployment_id", "deployment_replicas", ["deployment_id"])


def downgrade() -> None:
    op.drop_index("ix_deployment_replicas_deployment_id", table_name="deployment_replicas")
    op.drop_table("deployment_replicas")
    op.drop_index("ix_deployments_project_id", table_name="deployments")
    op.drop_table("deployments")
