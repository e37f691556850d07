"""Operations, for administrators: alert rules and alerts, the audit log, log search, usage history."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .base import Body, matching

RULE_NAME = r"[A-Za-z0-9][A-Za-z0-9 ._-]{0,99}"
Operator = Literal[">=", "<="]
Severity = Literal["info", "warning", "critical"]


class AlertRuleRequest(BaseModel):
    """An alert rule as an administrator writes it."""

    model_config = ConfigDict(extra="forbid")

    name: matching(RULE_NAME)  # type: ignore[valid-type]
    metric: str = Field(max_length=60, description="a signal's name (GET .../alerts lists them)")
    operator: Operator = ">="
    threshold: float = Field(allow_inf_nan=False)
    duration_seconds: int = Field(default=0, ge=0, le=7 * 24 * 3600, description="how long it must hold")
    target: str = Field(
        default="",
        max_length=200,
        description="one machine, project or PROJECT/DEPLOYMENT of the signal's scope; empty: every one",
    )
    severity: Severity = "warning"
    notify: list[str] = Field(
        default_factory=list,
        max_length=20,
        description="e-mail addresses and webhook URLs (http:// or https://)",
    )
    enabled: bool = True
    description: str = Field(default="", max_length=2000)


class AlertRule(Body):
    """An alert rule with the scope of its signal."""

    id: int
    name: str
    metric: str
    operator: Operator
    threshold: float
    duration_seconds: int
    scope: str
    target: str
    severity: str
    notify: list[str]
    enabled: bool
    description: str
    created: datetime
    updated: datetime


class AlertRuleList(Body):
    """The alert rules."""

    rules: list[AlertRule]


class Alert(Body):
    """One series of a rule whose condition held: pending, firing or resolved."""

    id: int
    rule: str
    severity: str
    state: Literal["pending", "firing", "resolved"]
    labels: dict[str, str]
    value: float
    summary: str
    since: datetime
    fired: datetime | None
    resolved: datetime | None


class AlertDelivery(Body):
    """One notification of an alert to one address or webhook, and how its tries went."""

    id: int
    alert_id: int
    rule: str
    event: Literal["firing", "resolved"]
    channel: Literal["email", "webhook"]
    target: str
    state: Literal["pending", "sent", "failed"]
    attempts: int
    error: str
    created: datetime
    sent: datetime | None


class Signal(Body):
    """What a rule may watch."""

    name: str
    scope: Literal["machine", "project", "deployment"]
    unit: str
    description: str


class Alerts(Body):
    """Rules, the alerts pending, firing and lately resolved, the latest deliveries, the signals."""

    rules: list[AlertRule]
    alerts: list[Alert]
    deliveries: list[AlertDelivery]
    signals: list[Signal]


class AuditEvent(Body):
    """Who did what, when, from where."""

    id: int
    time: datetime
    user: str
    action: str
    target: str
    project: str
    outcome: Literal["ok", "refused"]
    status: int | None
    client: str
    detail: dict


class AuditPage(Body):
    """Audit events, newest first; `more`: older ones match too."""

    events: list[AuditEvent]
    more: bool


class LogLine(Body):
    """A line of the platform's log, or of a job's or a replica's output."""

    source: Literal["platform", "job", "deployment"]
    name: str = Field(description="the log file (platform), the job id, or PROJECT/DEPLOYMENT/REPLICA")
    project: str
    user: str
    time: datetime | None = Field(description="the line's own time where it has one, else its file's")
    line: str


class LogSearch(Body):
    """The lines that matched, newest files first; `truncated`: the search stopped at its bound."""

    lines: list[LogLine]
    scanned_bytes: int
    truncated: bool


class UsagePoint(Body):
    """Use at one time: CPU cores, memory MB, GPU and NPU utilization %, and what the ledger held."""

    time: datetime
    use: dict[str, float]


class UsageHistory(Body):
    """One machine's, project's or user's use over a period, and the names of each scope on record."""

    scope: Literal["machine", "project", "user"]
    name: str
    period_seconds: int
    points: list[UsagePoint]
    names: dict[str, list[str]]
