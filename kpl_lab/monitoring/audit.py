"""The audit log: who did what, when and from where, appended to and read by administrators only.

Recorded:
- logins to the hub (`login_hook`, the hub's `Authenticator.post_auth_hook`);
- the API's changes that an operation of `kpl_lab.server_ext.routes` names (`Operation.audit`:
  model uploads, deployments and their keys, quotas, profiles, ...) and the admin page's
  (`audit` of its handlers: users, projects, members, quotas, alert rules), once answered 2xx;
- refused requests that look like attacks: every 401 and 403, and 400s that refused a path
  traversal, an absolute path or a link in an upload (`SUSPICIOUS`).
The caller's address is the one tornado sees, through the proxy's X-Forwarded-For where the
host trusts it (the hub's service does, as the hub does).

A request's event is queued in memory (`record`: one append) and written by the background
round (`flush`), off the request path; a process with no round writes at once (`now=True`).
Events are never changed; those older than `retention_days`, or beyond the newest
`max_events`, are dropped (`prune`).
"""

from __future__ import annotations

import logging
import re
import threading
from collections import deque
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, insert, select
from traitlets import Float, Integer
from traitlets.config import LoggingConfigurable

from ..api.monitoring import AuditEvent as AuditEventModel
from ..api.monitoring import AuditPage
from ..catalog.audit import AuditEvent
from ..catalog.models import utcnow
from ..catalog.serialize import utc

log = logging.getLogger(__name__)

OK, REFUSED = "ok", "refused"
REFUSED_ACTION = "request.refused"
LOGIN = "login"
QUEUE_MAX = 10_000  # events waiting for the round at most; a flood beyond it is counted, not kept
PAGE_MAX = 1000
EXPORT_BATCH = 1000
# what the hostile-safe importers and unpackers say when they refuse an entry of an upload
SUSPICIOUS = re.compile(
    r"path traversal|absolute path|outside the|symbolic link|links are not accepted|NUL byte", re.IGNORECASE
)


def looks_like_attack(status: int, message: str) -> bool:
    """Say whether a refusal is worth an audit event: 401, 403, or a 400 refusing an unsafe path or link."""
    return status in (401, 403) or (status == 400 and bool(SUSPICIOUS.search(message or "")))


def _row(event: dict) -> dict:
    """Return an event with every column bounded to its width."""
    return {
        "time": event.get("time") or utcnow(),
        "user": str(event.get("user") or "")[:200],
        "action": str(event["action"])[:60],
        "target": str(event.get("target") or "")[:500],
        "project": str(event.get("project") or "")[:100],
        "outcome": event.get("outcome") or OK,
        "status": event.get("status"),
        "client": str(event.get("client") or "")[:100],
        "detail": event.get("detail") or {},
    }


def model(row: AuditEvent) -> AuditEventModel:
    """Return an event as the API answers it."""
    return AuditEventModel(
        id=row.id,
        time=utc(row.time),
        user=row.user,
        action=row.action,
        target=row.target,
        project=row.project,
        outcome=row.outcome,
        status=row.status,
        client=row.client,
        detail=row.detail or {},
    )


class AuditLog(LoggingConfigurable):
    """Append audit events; read, export and prune them."""

    retention_days = Float(365.0, help="Days an audit event is kept.").tag(config=True)
    max_events = Integer(1_000_000, help="Audit events kept at most (the oldest go first).").tag(config=True)

    def __init__(self, platform: Any, **kwargs: Any) -> None:
        super().__init__(parent=platform, **kwargs)
        self.platform = platform
        self._queue: deque[dict] = deque()
        self._lock = threading.Lock()
        self.dropped = 0  # events a flood pushed past the queue's bound

    def record(self, action: str, *, now: bool = False, **fields: Any) -> None:
        """Record one event (fields: user, target, project, outcome, status, client, detail).

        Queued for the background round's `flush`; `now=True` writes it at once (a process with no round).
        """
        event = _row({"action": action, **fields, "time": utcnow()})
        if now:
            self._write([event])
            return
        with self._lock:
            if len(self._queue) >= QUEUE_MAX:
                self.dropped += 1
                return
            self._queue.append(event)

    def flush(self) -> int:
        """Write the queued events; return how many."""
        with self._lock:
            events, self._queue = list(self._queue), deque()
        if events:
            self._write(events)
        if self.dropped:
            log.warning(
                "kpl audit: %d events were dropped (more than %d waited for a round)", self.dropped, QUEUE_MAX
            )
            self.dropped = 0
        return len(events)

    def _write(self, events: list[dict]) -> None:
        with self.platform.session() as session:
            session.execute(insert(AuditEvent), events)

    def _query(
        self,
        user: str | None = None,
        action: str | None = None,
        project: str | None = None,
        outcome: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        before: int | None = None,
    ):
        query = select(AuditEvent)
        if user:
            query = query.where(AuditEvent.user == user)
        if action:  # "deployment." (or "deployment.*") matches every deployment action
            prefix = action.rstrip("*")
            query = query.where(
                AuditEvent.action.startswith(prefix, autoescape=True)
                if prefix.endswith(".")
                else AuditEvent.action == action
            )
        if project:
            query = query.where(AuditEvent.project == project)
        if outcome:
            query = query.where(AuditEvent.outcome == outcome)
        if since is not None:
            query = query.where(AuditEvent.time >= since)
        if until is not None:
            query = query.where(AuditEvent.time < until)
        if before is not None:
            query = query.where(AuditEvent.id < before)
        return query.order_by(AuditEvent.id.desc())

    def page(self, limit: int = 100, **filters: Any) -> AuditPage:
        """Return the newest events that match, at most `limit`; `before`: an event id to page back from."""
        self.flush()
        limit = max(1, min(limit, PAGE_MAX))
        with self.platform.session() as session:
            rows = list(session.scalars(self._query(**filters).limit(limit + 1)))
        return AuditPage(events=[model(row) for row in rows[:limit]], more=len(rows) > limit)

    def export(self, **filters: Any) -> Iterator[str]:
        """Yield every matching event as one JSON line, newest first, a batch at a time."""
        self.flush()
        before = filters.pop("before", None)
        while True:
            with self.platform.session() as session:
                rows = list(session.scalars(self._query(before=before, **filters).limit(EXPORT_BATCH)))
            for row in rows:
                yield model(row).model_dump_json() + "\n"
            if len(rows) < EXPORT_BATCH:
                return
            before = rows[-1].id

    def prune(self) -> int:
        """Drop the events older than `retention_days` and beyond the newest `max_events`; return how many."""
        cutoff = utcnow() - timedelta(days=self.retention_days)
        with self.platform.session() as session:
            dropped = session.execute(delete(AuditEvent).where(AuditEvent.time < cutoff)).rowcount
            newest = session.scalar(select(func.max(AuditEvent.id)))
            if newest is not None and newest > self.max_events:
                dropped += session.execute(
                    delete(AuditEvent).where(AuditEvent.id <= newest - self.max_events)
                ).rowcount
        return dropped


_route_actions: dict[tuple[type, str], str] = {}


def audited_action(handler: Any) -> str:
    """Return the audit action of a handler's method: its `audited` table, or its route's `Operation.audit`."""
    method = handler.request.method.lower()
    own = getattr(type(handler), "audited", None)
    if own is not None:
        return own.get(method, "")
    if not _route_actions:
        from ..server_ext.routes import ROUTES

        for route in ROUTES:
            for verb, operation in route.operations.items():
                if operation.audit:
                    _route_actions[(route.handler, verb)] = operation.audit
    return _route_actions.get((type(handler), method), "")


def caller(handler: Any) -> str:
    """Return the name of a request's caller, "" when not logged in."""
    user = handler.current_user if hasattr(handler, "_current_user") else None
    return str(getattr(user, "name", "") or getattr(user, "username", "") or "")


def note_request(handler: Any, audit: AuditLog) -> None:
    """Queue a finished request's audit event: an audited change that succeeded, or a refusal like an attack."""
    status = handler.get_status()
    action = audited_action(handler) if status < 400 else ""
    refusal = getattr(handler, "refusal", "")
    if not action and not looks_like_attack(status, refusal):
        return
    project = handler.__dict__.get("project") or handler.get_query_argument("project", "") or ""
    if action:
        target = (
            getattr(handler, "audit_target", "")
            or "/".join(handler.path_args)
            or handler.get_query_argument("name", "")
            or ""
        )
        audit.record(
            action,
            user=caller(handler),
            target=target,
            project=project,
            status=status,
            client=handler.request.remote_ip,
            detail=getattr(handler, "audit_detail", None) or {},
        )
    else:
        audit.record(
            REFUSED_ACTION,
            user=caller(handler),
            target=handler.request.path,
            project=project,
            outcome=REFUSED,
            status=status,
            client=handler.request.remote_ip,
            detail={"method": handler.request.method, "reason": refusal[:300]},
        )


# the hub's login hook: the hub process has no background round, so it writes at once

_platforms: dict[int, Any] = {}
_platforms_lock = threading.Lock()


def _platform_of(config: Any) -> Any:
    from ..platform import Platform

    with _platforms_lock:
        key = id(config)
        if key not in _platforms:
            _platforms[key] = Platform(config=config)
        return _platforms[key]


def login_hook(authenticator: Any, handler: Any, authentication: dict | None) -> dict | None:
    """Record a login to the hub (`c.Authenticator.post_auth_hook`); the login goes on whatever happens here."""
    if authentication:
        try:
            platform = _platform_of(authenticator.config)
            platform.audit.record(
                LOGIN,
                now=True,
                user=authentication.get("name", ""),
                target="hub",
                client=handler.request.remote_ip if handler is not None else "",
                detail={"authenticator": type(authenticator).__name__},
            )
        except Exception:  # an audit that fails must not lock people out; the hub's log says why
            log.exception("kpl audit: the login of %r was not recorded", authentication.get("name"))
    return authentication


__all__ = ["AuditLog", "login_hook", "looks_like_attack"]
