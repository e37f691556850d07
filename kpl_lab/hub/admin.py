"""The admin page at /services/kpl/admin and its API: users, projects and quotas, reservations, monitoring.

Monitoring: live use and the usage history per machine, project and user, the platform's
totals, alert rules and alerts, the audit log (filtered, exported as JSON lines) and the log
search; and `/services/kpl/metrics` in Prometheus' format. All of it is platform data, for
hub admins only (the metrics: for tokens with the scope `read:metrics`, as the hub's own).
"""

from __future__ import annotations

import html
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_server.auth.decorator import allow_unauthenticated
from jupyter_server.base.handlers import APIHandler, JupyterHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from jupyterhub.utils import url_path_join
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from sqlalchemy import select
from tornado import web

from ..catalog.jobs import Reservation
from ..catalog.rules import QUOTA
from ..catalog.serialize import utc
from ..catalog.storage import check_name
from ..charts import UPLOT_CSS, UPLOT_SCRIPT, asset
from ..errors import BadRequest, Forbidden, KPLError
from ..monitoring import history
from ..monitoring.audit import OK, REFUSED
from ..monitoring.logs import SOURCES
from ..server_ext.base import KPLHandler
from .directory import HubDirectory

if TYPE_CHECKING:
    from .service import KPLService

STATIC = Path(__file__).parent / "static"
METRICS_SCOPE = "read:metrics"  # the hub's own scope for its /metrics
PERIOD_MAX = 31 * 24 * 3600
JSON_LINES = "application/jsonl; charset=utf-8"
CONTENT_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}


def reservations(platform) -> list[dict]:
    """Return every reservation of the ledger: running notebooks and jobs with what they hold."""
    with platform.session() as session:
        return [
            {
                "project": row.project,
                "kind": row.owner_kind,
                "owner": row.owner_id,
                "cpu": row.cpu,
                "memory": row.memory,
                "devices": row.devices or {},
                "since": row.created and utc(row.created).isoformat(),
            }
            for row in session.scalars(select(Reservation).order_by(Reservation.id))
        ]


def project_use(platform, projects: list[str]) -> dict[str, dict]:
    """Return what each project holds now in the ledger."""
    ledger = platform.jobs.ledger
    with platform.session() as session:
        return {project: ledger.usage(session, project).to_json() for project in projects}


class AdminMixin:
    """Refuse every caller who is not a hub admin; write to the hub with the admin's own token."""

    def check_admin(self) -> None:
        user = self.current_user
        if user is None:
            raise web.HTTPError(403)
        if not getattr(user, "admin", False):
            raise Forbidden("the admin page is for hub admins")

    def as_caller(self) -> HubDirectory:
        """Return the hub directory with the caller's own token: the hub checks each change is hers to make.

        The service's token only reads (users, groups, servers); creating users and projects and
        changing members and quotas is the admin's (the OAuth token of her browser carries the
        service's `oauth_client_allowed_scopes` she holds herself, an API token hers).
        """
        token = self.settings["identity_provider"].hub_auth.get_token(self)
        if not token:
            raise Forbidden("no hub token came with the request")
        return HubDirectory(self.app.hub_api_url, token)


class AdminPageHandler(AdminMixin, ExtensionHandlerMixin, JupyterHandler):
    """GET: the page (its script reads the overview and writes quotas)."""

    @web.authenticated
    def get(self) -> None:
        """Answer the page."""
        self.check_admin()
        page = (STATIC / "admin.html").read_text()
        page = page.replace("{{xsrf}}", html.escape(self.xsrf_token.decode(), quote=True))
        page = page.replace("{{prefix}}", html.escape(self.settings["base_url"], quote=True))
        hub_prefix = url_path_join(os.environ.get("JUPYTERHUB_BASE_URL", "/"), "hub/")
        page = page.replace("{{hub_prefix}}", html.escape(hub_prefix, quote=True))
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(page)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Answer a short page naming the refusal (the service has no page templates)."""
        error = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(error, KPLError):
            status_code = error.status
            self.set_status(status_code)
        message = getattr(error, "message", None) or getattr(error, "log_message", None) or self._reason
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(f"<!doctype html><title>{status_code}</title><p>{html.escape(str(message))}</p>")


class OverviewHandler(AdminMixin, KPLHandler):
    """GET: users, projects with quotas and use, reservations, live use and its history."""

    @web.authenticated
    async def get(self) -> None:
        """Answer the overview."""
        self.check_admin()
        service: KPLService = self.app
        users = await service.directory.users()
        groups = await service.directory.groups()
        names = sorted({g["name"] for g in groups} | {service.platform.default_project})
        use = await self.blocking(project_use, self.platform, names)
        await service.refresh_quotas()  # the rules as the hub's groups say now, then as the platform decides
        quotas = await self.blocking(self.platform.jobs.ledger.rules.read_all, QUOTA)
        self.reply(
            {
                "users": [
                    {
                        "name": u["name"],
                        "admin": u.get("admin", False),
                        "projects": u.get("groups", []),
                        "servers": {
                            name: {"ready": s.get("ready"), "started": s.get("started"), "url": s.get("url")}
                            for name, s in (u.get("servers") or {}).items()
                        },
                    }
                    for u in users
                ],
                "projects": [
                    {
                        "name": name,
                        "members": [u["name"] for u in users if name in (u.get("groups") or [])],
                        "quota": quotas.get(name, {}),
                        "used": use[name],
                    }
                    for name in names
                ],
                "reservations": await self.blocking(reservations, self.platform),
                "capacity": self.platform.jobs.ledger.capacity(),
                "live": service.monitor.live,
                "totals": service.monitor.snapshot.totals() if service.monitor.snapshot else None,
            }
        )


class QuotaHandler(AdminMixin, KPLHandler):
    """PUT: a project's quota, written into its group properties in the hub."""

    audited = {"put": "quota.set"}

    @web.authenticated
    async def put(self, project: str) -> None:
        """Write the quota and answer it."""
        self.check_admin()
        check_name(project, "project")
        quota = self.json_body()
        if not isinstance(quota, dict):
            raise BadRequest('the body must be a JSON object such as {"cpu": 8, "gpu": 1}', field="body")
        checked = await self.as_caller().set_quota(project, quota)
        await self.blocking(self.platform.jobs.ledger.rules.set, QUOTA, project, checked, sourced=True)
        self.audit_detail = {"quota": checked}
        self.reply({"project": project, "quota": checked})


def _name(body: Any, key: str) -> str:
    """Return a name field of a JSON body, or refuse the body naming the field."""
    if not isinstance(body, dict) or not isinstance(body.get(key), str) or not body[key]:
        raise BadRequest(f'the body must be a JSON object with a "{key}" name', field=key)
    return body[key]


class UsersHandler(AdminMixin, KPLHandler):
    """POST {"name"}: create a hub user."""

    audited = {"post": "user.create"}

    @web.authenticated
    async def post(self) -> None:
        """Create the user and answer its name."""
        self.check_admin()
        name = _name(self.json_body(), "name")
        await self.as_caller().create_user(name)
        self.audit_target = name
        self.reply({"name": name}, status=201)


class ProjectsHandler(AdminMixin, KPLHandler):
    """POST {"name", "quota"}: create a project (a hub group) with its quota."""

    audited = {"post": "project.create"}

    @web.authenticated
    async def post(self) -> None:
        """Create the project and answer it with its checked quota."""
        self.check_admin()
        body = self.json_body()
        name = _name(body, "name")
        quota = body.get("quota") or {}
        if not isinstance(quota, dict):
            raise BadRequest('"quota" must be a JSON object such as {"cpu": 8, "gpu": 1}', field="quota")
        created = await self.as_caller().create_project(name, quota)
        await self.blocking(self.platform.jobs.ledger.rules.set, QUOTA, name, created["quota"], sourced=True)
        self.audit_target, self.audit_detail = name, {"quota": created["quota"]}
        self.reply(created, status=201)


class MembersHandler(AdminMixin, KPLHandler):
    """POST {"user"}: add an existing user to a project."""

    audited = {"post": "project.member.add"}

    @web.authenticated
    async def post(self, project: str) -> None:
        """Add the member and answer the pair."""
        self.check_admin()
        user = _name(self.json_body(), "user")
        await self.as_caller().add_member(project, user)
        self.audit_target = f"{project}/{user}"
        self.reply({"project": project, "user": user}, status=201)


class AlertsHandler(AdminMixin, KPLHandler):
    """GET: the alert rules, the alerts pending, firing and lately resolved, the latest deliveries, the signals."""

    @web.authenticated
    async def get(self) -> None:
        """Answer the alerts."""
        self.check_admin()
        self.reply(await self.blocking(self.platform.alerts.overview))


class AlertRulesHandler(AdminMixin, KPLHandler):
    """POST: add an alert rule."""

    audited = {"post": "alert.rule.create"}

    @web.authenticated
    async def post(self) -> None:
        """Check and add the rule; answer it."""
        self.check_admin()
        rule = await self.blocking(self.platform.alerts.create, self.json_body())
        self.audit_target, self.audit_detail = rule.name, rule.model_dump(mode="json")
        self.reply(rule, status=201)


class AlertRuleHandler(AdminMixin, KPLHandler):
    """PUT: replace an alert rule; DELETE: delete it with its alerts."""

    audited = {"put": "alert.rule.replace", "delete": "alert.rule.delete"}

    @web.authenticated
    async def put(self, rule_id: str) -> None:
        """Check and write the rule; answer it."""
        self.check_admin()
        rule = await self.blocking(self.platform.alerts.replace, int(rule_id), self.json_body())
        self.audit_target, self.audit_detail = rule.name, rule.model_dump(mode="json")
        self.reply(rule)

    @web.authenticated
    async def delete(self, rule_id: str) -> None:
        """Delete the rule."""
        self.check_admin()
        self.audit_target = await self.blocking(self.platform.alerts.delete, int(rule_id))
        self.reply({"deleted": self.audit_target})


class AuditHandler(AdminMixin, KPLHandler):
    """GET: audit events, newest first, filtered; `format=jsonl` exports every match as JSON lines."""

    @web.authenticated
    async def get(self) -> None:
        """Answer a page of events, or stream the export."""
        self.check_admin()
        outcome = self.get_query_argument("outcome", "") or None
        if outcome not in (None, OK, REFUSED):
            raise BadRequest(f"outcome: expected {OK} or {REFUSED}, got {outcome!r}", field="outcome")
        filters = {
            "user": self.get_query_argument("user", "") or None,
            "action": self.get_query_argument("action", "") or None,
            "project": self.get_query_argument("project", "") or None,
            "outcome": outcome,
            "since": self.query_time("since"),
            "until": self.query_time("until"),
        }
        if self.get_query_argument("format", "") == "jsonl":
            self.set_header("Content-Type", JSON_LINES)
            self.set_header("Content-Disposition", 'attachment; filename="kpl-audit.jsonl"')
            lines = self.platform.audit.export(**filters)
            while True:
                batch = await self.blocking(_next_batch, lines)
                if not batch:
                    break
                self.write("".join(batch))
                await self.flush()
            self.finish(set_content_type=JSON_LINES)
            return
        limit = self.query_int("limit", 100, 1, 1000)
        before = self.query_int("before", 0, 0, 2**62) or None
        self.reply(await self.blocking(self.platform.audit.page, limit=limit, before=before, **filters))


def _next_batch(lines, size: int = 1000) -> list[str]:
    """Return the next lines of an export (on a worker thread: each batch reads the database)."""
    batch = []
    for line in lines:
        batch.append(line)
        if len(batch) >= size:
            break
    return batch


class LogsHandler(AdminMixin, KPLHandler):
    """GET: search the platform's log, or the jobs' or replicas' output, by project, user, time and text."""

    @web.authenticated
    async def get(self) -> None:
        """Answer the matching lines."""
        self.check_admin()
        source = self.get_query_argument("source", "platform")
        if source not in SOURCES:
            raise BadRequest(f"source: expected one of {', '.join(SOURCES)}, got {source!r}", field="source")
        found = await self.blocking(
            self.app.logs.search,
            source=source,
            text=self.get_query_argument("q", "")[:200],
            project=self.get_query_argument("project", ""),
            user=self.get_query_argument("user", ""),
            since=self.query_time("since"),
            until=self.query_time("until"),
            limit=self.query_int("limit", 200, 1, 2000),
        )
        self.reply(found)


class UsageHandler(AdminMixin, KPLHandler):
    """GET: the use of a machine, project or user over a period (`period` seconds), from the usage history."""

    @web.authenticated
    async def get(self) -> None:
        """Answer the points and the names on record."""
        self.check_admin()
        scope = self.get_query_argument("scope", "machine")
        if scope not in history.SCOPES:
            raise BadRequest(
                f"scope: expected one of {', '.join(history.SCOPES)}, got {scope!r}", field="scope"
            )
        period = self.query_int("period", 24 * 3600, 60, PERIOD_MAX)
        name = self.get_query_argument("name", "")
        self.reply(await self.blocking(history.series, self.platform, scope, name, period))


class MetricsHandler(KPLHandler):
    """GET: the metrics in Prometheus' text format, for a token with the scope `read:metrics` (as the hub's)."""

    @allow_unauthenticated  # a Prometheus server's token is a service's, not a user's: checked here
    async def get(self) -> None:
        """Answer the metrics."""
        model = await self.settings["identity_provider"].hub_model(self)
        if model is None:
            raise web.HTTPError(403, "the metrics need a hub token")
        if METRICS_SCOPE not in (model.get("scopes") or []):
            raise web.HTTPError(403, f"Access to metrics requires scope '{METRICS_SCOPE}'")
        self.finish(generate_latest(REGISTRY), set_content_type=CONTENT_TYPE_LATEST)


class AssetHandler(ExtensionHandlerMixin, APIHandler):
    """GET: the page's script and its charts' library, uPlot, from the package (no CDN)."""

    @web.authenticated
    def get(self, name: str) -> None:
        """Answer admin.js, uPlot's script or its stylesheet."""
        if name == "admin.js":
            text = (STATIC / name).read_text(encoding="utf-8")
        else:
            try:
                text = asset(name)
            except FileNotFoundError as error:
                raise web.HTTPError(500, str(error)) from None
        self.finish(text, set_content_type=CONTENT_TYPES[Path(name).suffix])


# the admin API's routes under the service prefix: {project} one name, {rule} a number
ADMIN_API = [
    ("admin/api/overview", OverviewHandler),
    ("admin/api/projects/{project}/quota", QuotaHandler),
    ("admin/api/users", UsersHandler),
    ("admin/api/projects", ProjectsHandler),
    ("admin/api/projects/{project}/members", MembersHandler),
    ("admin/api/alerts", AlertsHandler),
    ("admin/api/alerts/rules", AlertRulesHandler),
    ("admin/api/alerts/rules/{rule}", AlertRuleHandler),
    ("admin/api/audit", AuditHandler),
    ("admin/api/logs", LogsHandler),
    ("admin/api/usage", UsageHandler),
    ("metrics", MetricsHandler),
]
for _template, _handler in ADMIN_API:
    _handler.route = "/" + _template  # the metrics' route label


def _pattern(template: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: "([0-9]+)" if m.group(1) == "rule" else "([^/]+)", template)


def admin_handlers(prefix: str, kwargs: dict[str, Any]) -> list[tuple]:
    """Return the admin page's and its API's routes under the service prefix."""
    return [
        # the hub's Services menu links to the service's root
        (
            prefix.rstrip("/") + "/?",
            web.RedirectHandler,
            {"url": url_path_join(prefix, "admin"), "permanent": False},
        ),
        (url_path_join(prefix, "admin/?"), AdminPageHandler, kwargs),
        *((url_path_join(prefix, _pattern(template)), handler, kwargs) for template, handler in ADMIN_API),
        (
            url_path_join(prefix, f"admin/(admin\\.js|{re.escape(UPLOT_SCRIPT)}|{re.escape(UPLOT_CSS)})"),
            AssetHandler,
            kwargs,
        ),
    ]


__all__ = ["admin_handlers"]
