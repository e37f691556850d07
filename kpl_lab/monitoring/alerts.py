"""Alert rules and their alerts: edited by administrators, evaluated in the background round.

No extra server: the host's `Monitor` hands each new `Snapshot` to `Alerts.evaluate`, which
compares every enabled rule's series with its threshold. A series whose condition holds is
`pending`; once it has held for the rule's duration it is `firing`, and each of the rule's
`notify` entries gets a delivery (`kpl_lab.monitoring.notify`); when it no longer holds (or
its series is gone) it is `resolved`, and notified again. A pending one that stops holding
is forgotten. Resolved alerts are kept `keep_days`, with their deliveries.

The rules shipped (`DEFAULT_RULES`) are written once, the first time a platform evaluates;
an administrator's edits and deletions stand.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from sqlalchemy import delete, select
from traitlets import Float
from traitlets.config import LoggingConfigurable

from ..api import monitoring as api
from ..catalog.alerts import Alert, AlertDelivery, AlertRule
from ..catalog.models import utcnow
from ..catalog.rules import MACHINE
from ..catalog.serialize import utc
from ..errors import BadRequest, Conflict, NotFound, validation_error
from .notify import Notifier, summary, webhook
from .signals import SIGNALS, matches

if TYPE_CHECKING:
    from .snapshot import Snapshot

PENDING, FIRING, RESOLVED = "pending", "firing", "resolved"
SEEDED = "alert_defaults"  # the rule (kpl_lab.catalog.rules) saying the shipped rules were written
EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
RECENT_ALERTS, RECENT_DELIVERIES = 100, 100

DEFAULT_RULES = [
    {
        "name": "machine memory",
        "metric": "machine_memory_percent",
        "operator": ">=",
        "threshold": 70,
        "duration_seconds": 300,
        "severity": "warning",
        "description": "The machine's memory has been 70 % used or more for 5 minutes.",
    },
    {
        "name": "disk full",
        "metric": "machine_disk_percent",
        "operator": ">=",
        "threshold": 90,
        "duration_seconds": 0,
        "severity": "critical",
        "description": "The disk of the platform's home or storage is 90 % full or more.",
    },
    {
        "name": "deployment errors",
        "metric": "deployment_error_percent",
        "operator": ">=",
        "threshold": 5,
        "duration_seconds": 300,
        "severity": "warning",
        "description": "5 % or more of a deployment's predictions failed over 5 minutes.",
    },
    {
        "name": "job failed",
        "metric": "project_jobs_failed",
        "operator": ">=",
        "threshold": 1,
        "duration_seconds": 0,
        "severity": "info",
        "description": "A job of the project failed (the alert resolves 10 minutes after the last failure).",
    },
    {
        "name": "idle GPU notebook",
        "metric": "notebook_gpu_utilization_percent",
        "operator": "<=",
        "threshold": 5,
        "duration_seconds": 3600,
        "severity": "info",
        "description": "A notebook has held GPUs for an hour and used them 5 % or less.",
    },
]


def holds(operator: str, value: float, threshold: float) -> bool:
    """Say whether a value crosses a rule's threshold."""
    return value >= threshold if operator == ">=" else value <= threshold


def fingerprint(rule_id: int, labels: dict[str, str]) -> str:
    """Return the identity of one series of one rule."""
    return hashlib.sha256(json.dumps([rule_id, labels], sort_keys=True).encode()).hexdigest()


def check_rule(body: Any) -> api.AlertRuleRequest:
    """Return a rule checked: its fields, its signal, its target and where it notifies (BadRequest naming the field)."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object (an alert rule)", field="body")
    try:
        rule = api.AlertRuleRequest.model_validate(body)
    except ValidationError as error:
        raise validation_error(error) from None
    if rule.metric not in SIGNALS:
        raise BadRequest(
            f"metric: unknown signal {rule.metric!r}; known: {', '.join(SIGNALS)}", field="metric"
        )
    for index, entry in enumerate(rule.notify):
        if not (webhook(entry) or EMAIL.fullmatch(entry)):
            raise BadRequest(
                f"notify.{index}: expected an e-mail address or an http(s):// URL, got {entry!r}",
                field=f"notify.{index}",
            )
    if SIGNALS[rule.metric].scope == "deployment" and rule.target and rule.target.count("/") != 1:
        raise BadRequest("target: a deployment is named PROJECT/DEPLOYMENT", field="target")
    return rule


def rule_model(row: AlertRule) -> api.AlertRule:
    """Return a rule as the API answers it."""
    return api.AlertRule(
        id=row.id,
        name=row.name,
        metric=row.metric,
        operator=row.operator,
        threshold=row.threshold,
        duration_seconds=row.duration_seconds,
        scope=row.scope,
        target=row.target,
        severity=row.severity,
        notify=list(row.notify or []),
        enabled=row.enabled,
        description=row.description,
        created=utc(row.created),
        updated=utc(row.updated),
    )


def alert_model(row: Alert) -> api.Alert:
    """Return an alert as the API answers it."""
    return api.Alert(
        id=row.id,
        rule=row.rule.name,
        severity=row.rule.severity,
        state=row.state,
        labels=row.labels,
        value=row.value,
        summary=summary(row),
        since=utc(row.since),
        fired=utc(row.fired),
        resolved=utc(row.resolved),
    )


class Alerts(LoggingConfigurable):
    """Read and edit the alert rules; evaluate them on each snapshot; keep the alerts bounded."""

    keep_days = Float(30.0, help="Days a resolved alert and its deliveries are kept.").tag(config=True)

    def __init__(self, platform: Any, **kwargs: Any) -> None:
        super().__init__(parent=platform, **kwargs)
        self.platform = platform
        self.notifier = Notifier(platform)

    # the rules

    def rules(self) -> list[api.AlertRule]:
        """Return every rule, by name."""
        self.seed()
        with self.platform.session() as session:
            return [rule_model(row) for row in session.scalars(select(AlertRule).order_by(AlertRule.name))]

    def create(self, body: Any) -> api.AlertRule:
        """Add a rule (409 when its name is taken)."""
        checked = check_rule(body)
        self.seed()
        with self.platform.session(immediate=True) as session:
            if session.scalar(select(AlertRule.id).where(AlertRule.name == checked.name)) is not None:
                raise Conflict(f"an alert rule named {checked.name!r} exists", field="name")
            row = AlertRule(scope=SIGNALS[checked.metric].scope, **checked.model_dump())
            session.add(row)
            session.flush()
            return rule_model(row)

    def replace(self, rule_id: int, body: Any) -> api.AlertRule:
        """Replace a rule; its alerts are those of the new condition from the next evaluation on."""
        checked = check_rule(body)
        with self.platform.session(immediate=True) as session:
            row = self._row(session, rule_id)
            taken = session.scalar(select(AlertRule.id).where(AlertRule.name == checked.name))
            if taken not in (None, rule_id):
                raise Conflict(f"an alert rule named {checked.name!r} exists", field="name")
            for key, value in checked.model_dump().items():
                setattr(row, key, value)
            row.scope, row.updated = SIGNALS[checked.metric].scope, utcnow()
            return rule_model(row)

    def delete(self, rule_id: int) -> str:
        """Delete a rule with its alerts and their deliveries; return its name."""
        with self.platform.session(immediate=True) as session:
            row = self._row(session, rule_id)
            name = row.name
            alert_ids = select(Alert.id).where(Alert.rule_id == rule_id)
            session.execute(delete(AlertDelivery).where(AlertDelivery.alert_id.in_(alert_ids)))
            session.execute(delete(Alert).where(Alert.rule_id == rule_id))
            session.delete(row)
        return name

    @staticmethod
    def _row(session, rule_id: int) -> AlertRule:
        row = session.get(AlertRule, rule_id)
        if row is None:
            raise NotFound(f"no alert rule {rule_id}", field="rule")
        return row

    def seed(self) -> None:
        """Write the shipped rules, once per platform."""
        rules = self.platform.jobs.ledger.rules
        if rules.read(SEEDED, MACHINE):
            return
        with self.platform.session(immediate=True) as session:
            if rules.get(session, SEEDED, MACHINE):
                return
            taken = set(session.scalars(select(AlertRule.name)))
            for rule in DEFAULT_RULES:
                if rule["name"] not in taken:
                    checked = check_rule(rule)
                    session.add(AlertRule(scope=SIGNALS[checked.metric].scope, **checked.model_dump()))
        rules.set(SEEDED, MACHINE, {"rules": [rule["name"] for rule in DEFAULT_RULES]})

    # what happened

    def overview(self) -> api.Alerts:
        """Return the rules, the alerts pending and firing and the latest resolved, the latest deliveries."""
        rules = self.rules()
        with self.platform.session() as session:
            active = list(
                session.scalars(select(Alert).where(Alert.state != RESOLVED).order_by(Alert.id.desc()))
            )
            resolved = list(
                session.scalars(
                    select(Alert)
                    .where(Alert.state == RESOLVED)
                    .order_by(Alert.id.desc())
                    .limit(RECENT_ALERTS)
                )
            )
            alerts = [alert_model(row) for row in [*active, *resolved]]
            deliveries = [
                api.AlertDelivery(
                    id=row.id,
                    alert_id=row.alert_id,
                    rule=row.alert.rule.name,
                    event=row.event,
                    channel=row.channel,
                    target=row.target,
                    state=row.state,
                    attempts=row.attempts,
                    error=row.error,
                    created=utc(row.created),
                    sent=utc(row.sent),
                )
                for row in session.scalars(
                    select(AlertDelivery).order_by(AlertDelivery.id.desc()).limit(RECENT_DELIVERIES)
                )
            ]
        signals = [
            api.Signal(name=s.name, scope=s.scope, unit=s.unit, description=s.description)
            for s in SIGNALS.values()
        ]
        return api.Alerts(rules=rules, alerts=alerts, deliveries=deliveries, signals=signals)

    # the background round

    def evaluate(self, snapshot: Snapshot, now: datetime | None = None) -> list[tuple[str, str, dict]]:
        """Move each rule's alerts on with the snapshot; return the changes (rule, new state, labels)."""
        self.seed()
        now = now or utcnow()
        changes: list[tuple[str, str, dict]] = []
        with self.platform.session(immediate=True) as session:
            rules = {row.id: row for row in session.scalars(select(AlertRule))}
            open_alerts = {
                (row.rule_id, row.fingerprint): row
                for row in session.scalars(select(Alert).where(Alert.state.in_((PENDING, FIRING))))
            }
            for rule in rules.values():
                if not rule.enabled:
                    continue
                signal = SIGNALS.get(rule.metric)
                if signal is None:  # a signal of a later version, gone since
                    continue
                for labels, value in signal.read(snapshot):
                    if not matches(rule.scope, rule.target, labels) or not holds(
                        rule.operator, value, rule.threshold
                    ):
                        continue
                    key = (rule.id, fingerprint(rule.id, labels))
                    alert = open_alerts.pop(key, None)
                    if alert is None:
                        alert = Alert(
                            rule=rule,
                            fingerprint=key[1],
                            labels=labels,
                            state=PENDING,
                            value=value,
                            since=now,
                        )
                        session.add(alert)
                    alert.value = value
                    if (
                        alert.state == PENDING
                        and (now - utc(alert.since)).total_seconds() >= rule.duration_seconds
                    ):
                        alert.state, alert.fired = FIRING, now
                        self._notify(session, alert, FIRING)
                        changes.append((rule.name, FIRING, labels))
            for alert in open_alerts.values():  # no longer holds, its series is gone, or its rule is off
                if alert.state == FIRING:
                    alert.state, alert.resolved = RESOLVED, now
                    self._notify(session, alert, RESOLVED)
                    changes.append((rules[alert.rule_id].name, RESOLVED, alert.labels))
                else:
                    session.delete(alert)
        for name, state, labels in changes:
            self.log.warning("kpl alerts: %s %s %s", name, state, labels)
        return changes

    def _notify(self, session, alert: Alert, event: str) -> None:
        session.flush()  # the alert's id
        for target in alert.rule.notify or []:
            session.add(
                AlertDelivery(
                    alert_id=alert.id,
                    event=event,
                    channel="webhook" if webhook(target) else "email",
                    target=target,
                    state="pending",
                    attempts=0,
                    next_attempt=utcnow(),
                    error="",
                )
            )

    def prune(self) -> int:
        """Drop resolved alerts (and their deliveries) older than `keep_days`; return how many."""
        cutoff = utcnow() - timedelta(days=self.keep_days)
        with self.platform.session(immediate=True) as session:
            old = select(Alert.id).where(Alert.state == RESOLVED, Alert.resolved < cutoff)
            session.execute(delete(AlertDelivery).where(AlertDelivery.alert_id.in_(old)))
            return session.execute(
                delete(Alert).where(Alert.state == RESOLVED, Alert.resolved < cutoff)
            ).rowcount
