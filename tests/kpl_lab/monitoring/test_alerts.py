"""Alert rules: checked when written, evaluated on snapshots (pending, firing, resolved), notified by e-mail and webhook."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from kpl_lab.catalog.alerts import Alert, AlertDelivery
from kpl_lab.catalog.models import utcnow
from kpl_lab.errors import BadRequest, Conflict
from kpl_lab.monitoring.alerts import DEFAULT_RULES

from .conftest import snapshot

pytestmark = pytest.mark.databases


def rule(**fields) -> dict:
    return {
        "name": "memory high",
        "metric": "machine_memory_percent",
        "operator": ">=",
        "threshold": 70,
        "duration_seconds": 300,
        "target": "",
        "notify": [],
        **fields,
    }


def states(platform) -> list[tuple[str, str]]:
    with platform.session() as session:
        return [(row.rule.name, row.state) for row in session.scalars(select(Alert).order_by(Alert.id))]


def deliveries(platform) -> list[tuple[str, str, str, int, str]]:
    with platform.session() as session:
        rows = session.scalars(select(AlertDelivery).order_by(AlertDelivery.id))
        return [(row.event, row.channel, row.state, row.attempts, row.error) for row in rows]


def quiet(platform) -> None:
    """Switch the shipped rules off, so only the test's own rules fire."""
    for found in platform.alerts.rules():
        platform.alerts.replace(
            found.id, {**rule(), **found.model_dump(include=set(rule())), "enabled": False}
        )


def test_the_shipped_rules_are_written_once_and_an_edit_stands(platform):
    names = [found.name for found in platform.alerts.rules()]
    assert sorted(names) == sorted(r["name"] for r in DEFAULT_RULES)
    memory = next(found for found in platform.alerts.rules() if found.metric == "machine_memory_percent")
    assert (memory.operator, memory.threshold, memory.duration_seconds, memory.scope) == (
        ">=",
        70,
        300,
        "machine",
    )
    platform.alerts.delete(memory.id)
    platform.alerts.seed()
    assert memory.name not in [found.name for found in platform.alerts.rules()]


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"metric": "memory"}, "metric", "unknown signal 'memory'"),
        ({"operator": ">"}, "operator", ""),
        ({"threshold": "high"}, "threshold", ""),
        ({"duration_seconds": -1}, "duration_seconds", ""),
        ({"notify": ["ops"]}, "notify.0", "an e-mail address or an http(s):// URL"),
        ({"notify": ["ftp://x/y"]}, "notify.0", "an e-mail address or an http(s):// URL"),
        ({"metric": "deployment_error_percent", "target": "api"}, "target", "PROJECT/DEPLOYMENT"),
        ({"name": ""}, "name", ""),
        ({"colour": "red"}, "colour", ""),
    ],
)
def test_a_bad_rule_is_refused_naming_its_field(platform, fields, field, words):
    with pytest.raises(BadRequest) as refused:
        platform.alerts.create(rule(**fields))
    assert refused.value.field == field
    assert words in refused.value.message


def test_a_rule_name_is_taken_once(platform):
    platform.alerts.create(rule())
    with pytest.raises(Conflict):
        platform.alerts.create(rule())


def test_an_alert_fires_after_its_duration_and_resolves(platform, mailbox, receiver):
    quiet(platform)
    notifier = platform.alerts.notifier
    notifier.smtp_host, notifier.smtp_port, notifier.external_url = (
        mailbox.host,
        mailbox.port,
        "http://hub/kpl/admin",
    )
    platform.alerts.create(rule(notify=["ops@example.com", receiver.url], description="Add memory."))
    start = utcnow()

    assert platform.alerts.evaluate(snapshot(memory_percent=80), now=start) == []
    assert states(platform) == [("memory high", "pending")]
    platform.alerts.evaluate(snapshot(memory_percent=75), now=start + timedelta(seconds=299))
    assert states(platform) == [("memory high", "pending")] and deliveries(platform) == []

    changes = platform.alerts.evaluate(snapshot(memory_percent=75), now=start + timedelta(seconds=300))
    assert changes == [("memory high", "firing", {"machine": "node-1"})]
    assert notifier.deliver_due() == 2
    assert [d[:3] for d in deliveries(platform)] == [
        ("firing", "email", "sent"),
        ("firing", "webhook", "sent"),
    ]
    [mail] = mailbox.messages
    assert mail["Subject"] == "[KPL Lab] FIRING: memory high"
    assert mail["X-Rcpt-To"] == "ops@example.com"
    text = mail.get_payload()
    assert "machine_memory_percent >= 70 on machine=node-1 (value 75)" in text
    assert "Add memory." in text and "http://hub/kpl/admin" in text
    [hook] = receiver.bodies
    assert (hook["version"], hook["status"], hook["receiver"]) == ("4", "firing", "kpl-lab")
    [alert] = hook["alerts"]
    assert alert["labels"] == {"alertname": "memory high", "severity": "warning", "machine": "node-1"}
    assert alert["endsAt"] == "0001-01-01T00:00:00Z" and alert["startsAt"].endswith("Z")
    assert alert["annotations"]["description"] == "Add memory."

    changes = platform.alerts.evaluate(snapshot(memory_percent=40), now=start + timedelta(seconds=400))
    assert changes == [("memory high", "resolved", {"machine": "node-1"})]
    assert notifier.deliver_due() == 2
    assert states(platform) == [("memory high", "resolved")]
    assert mailbox.messages[1]["Subject"] == "[KPL Lab] RESOLVED: memory high"
    assert (
        receiver.bodies[1]["status"] == "resolved"
        and receiver.bodies[1]["alerts"][0]["endsAt"] != alert["endsAt"]
    )
    overview = platform.alerts.overview()
    assert [(a.rule, a.state) for a in overview.alerts] == [("memory high", "resolved")]
    assert len(overview.deliveries) == 4 and all(d.state == "sent" for d in overview.deliveries)


def test_a_pending_alert_that_stops_holding_is_forgotten(platform):
    quiet(platform)
    platform.alerts.create(rule())
    start = utcnow()
    platform.alerts.evaluate(snapshot(memory_percent=90), now=start)
    platform.alerts.evaluate(snapshot(memory_percent=10), now=start + timedelta(seconds=10))
    assert states(platform) == []


def test_a_rule_keeps_to_its_target_and_compares_with_its_operator(platform):
    quiet(platform)
    platform.alerts.create(rule(name="elsewhere", duration_seconds=0, target="node-2"))
    platform.alerts.create(
        rule(name="idle", metric="gpu_utilization_percent", operator="<=", threshold=5, duration_seconds=0)
    )
    changes = platform.alerts.evaluate(snapshot(memory_percent=99, gpus=(50.0, 2.0)))
    assert changes == [("idle", "firing", {"machine": "node-1", "gpu": "1"})]


def test_a_failed_notification_is_tried_again_then_recorded_failed(platform, receiver, mailbox):
    quiet(platform)
    notifier = platform.alerts.notifier
    notifier.retry_seconds, notifier.attempts = 0.0, 3
    receiver.statuses = [500, 503]  # then 200
    platform.alerts.create(rule(duration_seconds=0, notify=[receiver.url, "ops@example.com"]))
    platform.alerts.evaluate(snapshot(memory_percent=95))
    notifier.deliver_due()
    assert deliveries(platform) == [
        ("firing", "webhook", "pending", 1, "OSError: the webhook answered 500 Internal Server Error"),
        ("firing", "email", "pending", 1, "OSError: no SMTP server is configured (c.Notifier.smtp_host)"),
    ]
    notifier.smtp_host, notifier.smtp_port = mailbox.host, mailbox.port
    notifier.deliver_due()
    notifier.deliver_due()
    assert [d[:4] for d in deliveries(platform)] == [
        ("firing", "webhook", "sent", 3),
        ("firing", "email", "sent", 2),
    ]
    assert len(receiver.bodies) == 3 and len(mailbox.messages) == 1

    receiver.statuses = [500] * 3
    platform.alerts.evaluate(snapshot(memory_percent=5))
    for _ in range(4):
        notifier.deliver_due()
    webhook = [d for d in deliveries(platform) if d[0] == "resolved" and d[1] == "webhook"]
    assert webhook == [
        ("resolved", "webhook", "failed", 3, "OSError: the webhook answered 500 Internal Server Error")
    ]


def test_a_retry_waits_and_each_wait_doubles(platform, receiver):
    quiet(platform)
    notifier = platform.alerts.notifier
    notifier.retry_seconds = 60.0
    receiver.statuses = [500]
    platform.alerts.create(rule(duration_seconds=0, notify=[receiver.url]))
    platform.alerts.evaluate(snapshot(memory_percent=95))
    assert notifier.deliver_due() == 1
    assert notifier.deliver_due() == 0  # its next try is a minute away
    with platform.session() as session:
        delivery = session.scalar(select(AlertDelivery))
        wait = (delivery.next_attempt.replace(tzinfo=None) - utcnow().replace(tzinfo=None)).total_seconds()
    assert 50 < wait <= 60


def test_signals_of_projects_deployments_and_notebooks(platform):
    quiet(platform)
    platform.alerts.create(rule(name="failed", metric="project_jobs_failed", threshold=1, duration_seconds=0))
    platform.alerts.create(
        rule(
            name="errors",
            metric="deployment_error_percent",
            threshold=5,
            duration_seconds=0,
            target="vision/api",
        )
    )
    platform.alerts.create(
        rule(
            name="idle",
            metric="notebook_gpu_utilization_percent",
            operator="<=",
            threshold=5,
            duration_seconds=0,
        )
    )
    seen = snapshot(gpus=(1.0, 90.0))
    seen.failed = {"vision": ["job-1"]}
    seen.deployments = [
        {"project": "vision", "name": "api", "error_percent": 12.5},
        {"project": "audio", "name": "api", "error_percent": 50.0},
        {"project": "vision", "name": "quiet", "error_percent": None},
    ]
    seen.reservations = [
        {
            "project": "vision",
            "kind": "notebook",
            "owner": "alice/",
            "user": "alice",
            "devices": {"gpu": [0]},
        },
        {"project": "vision", "kind": "notebook", "owner": "bob/", "user": "bob", "devices": {"gpu": [1]}},
        {"project": "vision", "kind": "job", "owner": "job-2", "user": "bob", "devices": {"gpu": [0]}},
    ]
    changes = sorted(platform.alerts.evaluate(seen), key=lambda change: change[0])
    assert changes == [
        ("errors", "firing", {"project": "vision", "deployment": "api"}),
        ("failed", "firing", {"project": "vision"}),
        ("idle", "firing", {"project": "vision", "notebook": "alice/", "user": "alice"}),
    ]


def test_resolved_alerts_are_kept_a_bounded_time(platform, receiver):
    quiet(platform)
    platform.alerts.create(rule(duration_seconds=0, notify=[receiver.url]))
    start = utcnow() - timedelta(days=40)
    platform.alerts.evaluate(snapshot(memory_percent=95), now=start)
    platform.alerts.evaluate(snapshot(memory_percent=5), now=start + timedelta(minutes=1))
    platform.alerts.evaluate(snapshot(memory_percent=95))
    assert platform.alerts.prune() == 1
    assert states(platform) == [("memory high", "firing")]
    assert [d[0] for d in deliveries(platform)] == ["firing"]
