"""Notifications of alerts: e-mail over SMTP and webhooks in Alertmanager's JSON, retried and recorded.

Each delivery (`kpl_lab.catalog.alerts.AlertDelivery`) is tried on the notifier's own thread,
never on the background round's: an SMTP server that hangs delays no job. A failure is tried
again after `retry_seconds`, doubled each time, until `attempts`; each try's outcome is
written on the delivery (its state, attempts and last error). The webhook's body is what
Alertmanager sends to its webhook receivers (version 4), so what listens to Alertmanager
listens to KPL Lab as it is.
"""

from __future__ import annotations

import json
import smtplib
import ssl
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from email.message import EmailMessage
from typing import Any

from sqlalchemy import select
from traitlets import Bool, Float, Integer, Unicode
from traitlets.config import LoggingConfigurable

from ..catalog.alerts import Alert, AlertDelivery
from ..catalog.models import utcnow
from ..catalog.serialize import utc
from .machine import name as machine_name

PENDING, SENT, FAILED = "pending", "sent", "failed"
BATCH = 50  # deliveries tried per round at most
NEVER = "0001-01-01T00:00:00Z"  # Alertmanager's endsAt of an alert still firing


def webhook(target: str) -> bool:
    """Say whether a rule's notify entry is a webhook URL (else an e-mail address)."""
    return target.startswith(("http://", "https://"))


def rfc3339(moment: datetime | None) -> str:
    """Return a time as Alertmanager writes it."""
    return NEVER if moment is None else utc(moment).isoformat().replace("+00:00", "Z")


def alert_labels(alert: Alert) -> dict[str, str]:
    """Return the alert's labels as Prometheus would: alertname, severity and the series'."""
    return {"alertname": alert.rule.name, "severity": alert.rule.severity, **alert.labels}


def summary(alert: Alert) -> str:
    """Return one line saying what crossed which threshold."""
    rule = alert.rule
    where = ", ".join(f"{k}={v}" for k, v in sorted(alert.labels.items())) or "the platform"
    return f"{rule.metric} {rule.operator} {rule.threshold:g} on {where} (value {alert.value:.4g})"


def payload(alert: Alert, event: str, external_url: str) -> dict:
    """Return Alertmanager's webhook body (version 4) for one alert's firing or resolving."""
    labels = alert_labels(alert)
    annotations = {"summary": summary(alert), "description": alert.rule.description}
    return {
        "version": "4",
        "groupKey": f'{{}}:{{alertname="{alert.rule.name}"}}',
        "truncatedAlerts": 0,
        "status": event,
        "receiver": "kpl-lab",
        "groupLabels": {"alertname": alert.rule.name},
        "commonLabels": labels,
        "commonAnnotations": annotations,
        "externalURL": external_url,
        "alerts": [
            {
                "status": event,
                "labels": labels,
                "annotations": annotations,
                "startsAt": rfc3339(alert.fired or alert.since),
                "endsAt": rfc3339(alert.resolved) if event == "resolved" else NEVER,
                "generatorURL": external_url,
                "fingerprint": alert.fingerprint[:16],
            }
        ],
    }


class Notifier(LoggingConfigurable):
    """Send the alerts' notifications: e-mail through an SMTP server, webhooks over HTTP."""

    smtp_host = Unicode(
        "", help="SMTP server the alerts' e-mail goes through (empty: no e-mail is sent)."
    ).tag(config=True)
    smtp_port = Integer(25, help="Port of the SMTP server (587 with smtp_starttls, 465 with smtp_ssl).").tag(
        config=True
    )
    smtp_from = Unicode(help="Sender of the alerts' e-mail; default kpl-lab@<this machine>.").tag(config=True)
    smtp_username = Unicode("", help="User to log in to the SMTP server as (empty: no login).").tag(
        config=True
    )
    smtp_password = Unicode("", help="Password of smtp_username.").tag(config=True)
    smtp_starttls = Bool(False, help="Upgrade the SMTP connection with STARTTLS.").tag(config=True)
    smtp_ssl = Bool(False, help="Connect to the SMTP server over TLS from the start (port 465).").tag(
        config=True
    )
    timeout_seconds = Float(10.0, help="Seconds one e-mail or webhook may take.").tag(config=True)
    attempts = Integer(5, help="Tries of one notification before it is recorded as failed.").tag(config=True)
    retry_seconds = Float(30.0, help="Seconds before the second try; each further wait doubles.").tag(
        config=True
    )
    external_url = Unicode(
        "", help="URL of the admin page, linked from each notification (e.g. https://hub/services/kpl/admin)."
    ).tag(config=True)

    def __init__(self, platform: Any, **kwargs: Any) -> None:
        super().__init__(parent=platform, **kwargs)
        self.platform = platform
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kpl-notify")
        self._busy = threading.Lock()

    def sender(self) -> str:
        """Return the From address."""
        return self.smtp_from or f"kpl-lab@{machine_name()}"

    def deliver_later(self) -> bool:
        """Try the due deliveries on the notifier's thread; False when a try is still under way."""
        if not self._busy.acquire(blocking=False):
            return False
        future = self._pool.submit(self.deliver_due)
        future.add_done_callback(lambda _: self._busy.release())
        return True

    def deliver_due(self) -> int:
        """Try every delivery whose time has come (blocking); return how many were tried."""
        now = utcnow()
        with self.platform.session() as session:
            due = list(
                session.scalars(
                    select(AlertDelivery.id)
                    .where(AlertDelivery.state == PENDING, AlertDelivery.next_attempt <= now)
                    .order_by(AlertDelivery.id)
                    .limit(BATCH)
                )
            )
        for delivery_id in due:
            self.try_one(delivery_id)
        return len(due)

    def try_one(self, delivery_id: int) -> str:
        """Send one delivery once and record the outcome; return its state after."""
        with self.platform.session() as session:
            delivery = session.get(AlertDelivery, delivery_id)
            alert = delivery.alert
            alert.rule  # noqa: B018  (loaded while the session is open)
            channel, target, event = delivery.channel, delivery.target, delivery.event
        try:
            if channel == "webhook":
                self.post(target, payload(alert, event, self.external_url))
            else:
                self.mail(target, alert, event)
            error = None
        except Exception as failure:  # every failure is the delivery's to record, and to retry
            error = f"{type(failure).__name__}: {failure}"
        with self.platform.session() as session:
            delivery = session.get(AlertDelivery, delivery_id)
            delivery.attempts += 1
            if error is None:
                delivery.state, delivery.sent, delivery.error = SENT, utcnow(), ""
            else:
                delivery.error = error[:2000]
                if delivery.attempts >= self.attempts:
                    delivery.state = FAILED
                else:
                    wait = self.retry_seconds * 2 ** (delivery.attempts - 1)
                    delivery.next_attempt = utcnow() + timedelta(seconds=wait)
                self.log.warning(
                    "kpl alerts: %s to %s: %s (try %d)", channel, target, error, delivery.attempts
                )
            return delivery.state

    def post(self, url: str, body: dict) -> None:
        """POST the JSON body to a webhook; an answer other than 2xx is a failure."""
        request = urllib.request.Request(
            url,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "User-Agent": "kpl-lab-alerts"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_seconds) as answer:  # noqa: S310 - an admin's URL
                answer.read(1 << 16)
        except urllib.error.HTTPError as error:
            raise OSError(f"the webhook answered {error.code} {error.reason}") from None

    def mail(self, address: str, alert: Alert, event: str) -> None:
        """Send one alert's e-mail to one address through the SMTP server."""
        if not self.smtp_host:
            raise OSError("no SMTP server is configured (c.Notifier.smtp_host)")
        message = EmailMessage()
        state = "FIRING" if event == "firing" else "RESOLVED"
        message["Subject"] = f"[KPL Lab] {state}: {alert.rule.name}"
        message["From"] = self.sender()
        message["To"] = address
        lines = [
            f"{state}: {summary(alert)}",
            f"rule: {alert.rule.name} ({alert.rule.severity}), held for {alert.rule.duration_seconds} s or more",
            f"since: {rfc3339(alert.fired or alert.since)}",
        ]
        if event == "resolved":
            lines.append(f"resolved: {rfc3339(alert.resolved)}")
        if alert.rule.description:
            lines.append(alert.rule.description)
        if self.external_url:
            lines.append(self.external_url)
        message.set_content("\n".join(lines) + "\n")
        connect = smtplib.SMTP_SSL if self.smtp_ssl else smtplib.SMTP
        with connect(self.smtp_host, self.smtp_port, timeout=self.timeout_seconds) as smtp:
            if self.smtp_starttls and not self.smtp_ssl:
                smtp.starttls(context=ssl.create_default_context())
            if self.smtp_username:
                smtp.login(self.smtp_username, self.smtp_password)
            smtp.send_message(message)

    def close(self) -> None:
        """Let a try under way end; drop none of the pending deliveries (the next host tries them)."""
        self._pool.shutdown(wait=True, cancel_futures=True)


__all__ = ["FAILED", "PENDING", "SENT", "Notifier", "payload", "webhook"]
