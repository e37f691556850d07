"""Alert tables: the rules an administrator sets, the alerts they raise and each notification sent.

A rule watches one signal of the platform (`kpl_lab.monitoring.signals`: a machine's memory,
a project's failed jobs, a deployment's error rate, ...) against a threshold for a duration.
An alert is one series of a rule (one machine, project, deployment or notebook) from the
moment its condition held (`pending`) through `firing` to `resolved`. A delivery is one
notification of one alert's change to one e-mail address or webhook, with its attempts.
These are platform data: only administrators read them.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from .db import Base
from .models import utcnow


class AlertRule(Base):
    """Raise an alert when `metric` `operator` `threshold` holds for `duration_seconds`."""

    __tablename__ = "alert_rules"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    metric: Mapped[str] = mapped_column(String(60))  # a signal of kpl_lab.monitoring.signals
    operator: Mapped[str] = mapped_column(String(2))  # ">=" or "<="
    threshold: Mapped[float] = mapped_column(Float)
    duration_seconds: Mapped[int] = mapped_column(Integer, default=0)
    scope: Mapped[str] = mapped_column(String(20))  # machine | project | deployment (the signal's)
    target: Mapped[str] = mapped_column(String(200), default="")  # one machine/project/deployment; "": all
    severity: Mapped[str] = mapped_column(String(20), default="warning")
    notify: Mapped[list] = mapped_column(JSON, default=list)  # e-mail addresses and webhook URLs
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    description: Mapped[str] = mapped_column(Text, default="")
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Alert(Base):
    """One series of a rule whose condition held: pending, then firing, then resolved."""

    __tablename__ = "alerts"
    __table_args__ = (Index("ix_alerts_rule_state", "rule_id", "state"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    rule_id: Mapped[int] = mapped_column(ForeignKey("alert_rules.id", ondelete="CASCADE"))
    fingerprint: Mapped[str] = mapped_column(String(64))  # the rule and the series' labels
    labels: Mapped[dict] = mapped_column(JSON, default=dict)
    state: Mapped[str] = mapped_column(String(10))  # pending | firing | resolved
    value: Mapped[float] = mapped_column(Float)  # the latest value seen while it held
    since: Mapped[datetime] = mapped_column(DateTime(timezone=True))  # the condition held from
    fired: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    resolved: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True, index=True)

    rule: Mapped[AlertRule] = relationship()


class AlertDelivery(Base):
    """One notification of an alert's firing or resolving to one address or webhook, and its attempts."""

    __tablename__ = "alert_deliveries"
    __table_args__ = (Index("ix_alert_deliveries_state_next", "state", "next_attempt"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    alert_id: Mapped[int] = mapped_column(ForeignKey("alerts.id", ondelete="CASCADE"), index=True)
    event: Mapped[str] = mapped_column(String(10))  # firing | resolved
    channel: Mapped[str] = mapped_column(String(10))  # email | webhook
    target: Mapped[str] = mapped_column(String(500))
    state: Mapped[str] = mapped_column(String(10), default="pending")  # pending | sent | failed
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    error: Mapped[str] = mapped_column(Text, default="")
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    sent: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)

    alert: Mapped[Alert] = relationship()
