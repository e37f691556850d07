"""operations: alert rules, alerts and their deliveries, the audit log, the usage history

Revision ID: 0012_operations
Revises: 0011_pipeline_checked
Create Date: 2026-12-02 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_operations"
down_revision = "0011_pipeline_checked"
branch_labels = None
depends_on = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "alert_rules",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(100), nullable=False, unique=True),
        sa.Column("metric", sa.String(60), nullable=False),
        sa.Column("operator", sa.String(2), nullable=False),
        sa.Column("threshold", sa.Float(), nullable=False),
        sa.Column("duration_seconds", sa.Integer(), nullable=False),
        sa.Column("scope", sa.String(20), nullable=False),
        sa.Column("target", sa.String(200), nullable=False),
        sa.Column("severity", sa.String(20), nullable=False),
        sa.Column("notify", sa.JSON(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "alerts",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "rule_id", sa.Integer(), sa.ForeignKey("alert_rules.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(10), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("fired", sa.DateTime(timezone=True), nullable=True),
        sa.Column("resolved", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_alerts_rule_state", "alerts", ["rule_id", "state"])
    op.create_index("ix_alerts_resolved", "alerts", ["resolved"])
    op.create_table(
        "alert_deliveries",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("alert_id", sa.Integer(), sa.ForeignKey("alerts.id", ondelete="CASCADE"), nullable=False),
        sa.Column("event", sa.String(10), nullable=False),
        sa.Column("channel", sa.String(10), nullable=False),
        sa.Column("target", sa.String(500), nullable=False),
        sa.Column("state", sa.String(10), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt", sa.DateTime(timezone=True), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.Column("sent", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_alert_deliveries_alert_id", "alert_deliveries", ["alert_id"])
    op.create_index("ix_alert_deliveries_state_next", "alert_deliveries", ["state", "next_attempt"])
    op.create_table(
        "audit_events",
        sa.Column("id", BIG_ID, primary_key=True, autoincrement=True),
        sa.Column("time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("user", sa.String(200), nullable=False),
        sa.Column("action", sa.String(60), nullable=False),
        sa.Column("target", sa.String(500), nullable=False),
        sa.Column("project", sa.String(100), nullable=False),
        sa.Column("outcome", sa.String(10), nullable=False),
        sa.Column("status", sa.Integer(), nullable=True),
        sa.Column("client", sa.String(100), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
    )
    for column in ("time", "user", "action", "project"):
        op.create_index(f"ix_audit_events_{column}", "audit_events", [column])
    op.create_table(
        "usage_samples",
        sa.Column("id", BIG_ID, primary_key=True, autoincrement=True),
        sa.Column("time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("scope", sa.String(10), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("use", sa.JSON(), nullable=False),
    )
    op.create_index("ix_usage_samples_time", "usage_samples", ["time"])
    op.create_index("ix_usage_samples_scope_name_time", "usage_samples", ["scope", "name", "time"])


def downgrade() -> None:
    op.drop_table("usage_samples")
    op.drop_table("audit_events")
    op.drop_table("alert_deliveries")
    op.drop_table("alerts")
    op.drop_table("alert_rules")
