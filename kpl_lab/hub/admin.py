"""The admin page at /services/kpl/admin: users, projects and quotas, reservations, live use, history."""

from __future__ import annotations

import html
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_server.base.handlers import APIHandler, JupyterHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from jupyterhub.utils import url_path_join
from sqlalchemy import select
from tornado import web

from ..catalog.jobs import Reservation
from ..catalog.rules import QUOTA
from ..catalog.serialize import utc
from ..catalog.storage import check_name
from ..charts import UPLOT_CSS, UPLOT_SCRIPT, asset
from ..errors import BadRequest, Forbidden, KPLError
from ..server_ext.base import KPLHandler
from .directory import HubDirectory

if TYPE_CHECKING:
    from .service import KPLService

STATIC = Path(__file__).parent / "static"
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
                "live": service.last_sample,
                "history": await self.blocking(service.history.series),
            }
        )


class QuotaHandler(AdminMixin, KPLHandler):
    """PUT: a project's quota, written into its group properties in the hub."""

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
        self.reply({"project": project, "quota": checked})


def _name(body: Any, key: str) -> str:
    """Return a name field of a JSON body, or refuse the body naming the field."""
    if not isinstance(body, dict) or not isinstance(body.get(key), str) or not body[key]:
        raise BadRequest(f'the body must be a JSON object with a "{key}" name', field=key)
    return body[key]


class UsersHandler(AdminMixin, KPLHandler):
    """POST {"name"}: create a hub user."""

    @web.authenticated
    async def post(self) -> None:
        """Create the user and answer its name."""
        self.check_admin()
        name = _name(self.json_body(), "name")
        await self.as_caller().create_user(name)
        self.reply({"name": name}, status=201)


class ProjectsHandler(AdminMixin, KPLHandler):
    """POST {"name", "quota"}: create a project (a hub group) with its quota."""

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
        self.reply(created, status=201)


class MembersHandler(AdminMixin, KPLHandler):
    """POST {"user"}: add an existing user to a project."""

    @web.authenticated
    async def post(self, project: str) -> None:
        """Add the member and answer the pair."""
        self.check_admin()
        user = _name(self.json_body(), "user")
        await self.as_caller().add_member(project, user)
        self.reply({"project": project, "user": user}, status=201)


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


def admin_handlers(prefix: str, kwargs: dict[str, Any]) -> list[tuple]:
    """Return the admin page's routes under the service prefix."""
    return [
        # the hub's Services menu links to the service's root
        (
            prefix.rstrip("/") + "/?",
            web.RedirectHandler,
            {"url": url_path_join(prefix, "admin"), "permanent": False},
        ),
        (url_path_join(prefix, "admin/?"), AdminPageHandler, kwargs),
        (url_path_join(prefix, "admin/api/overview"), OverviewHandler, kwargs),
        (url_path_join(prefix, "admin/api/projects/([^/]+)/quota"), QuotaHandler, kwargs),
        (url_path_join(prefix, "admin/api/users"), UsersHandler, kwargs),
        (url_path_join(prefix, "admin/api/projects"), ProjectsHandler, kwargs),
        (url_path_join(prefix, "admin/api/projects/([^/]+)/members"), MembersHandler, kwargs),
        (
            url_path_join(prefix, f"admin/(admin\\.js|{re.escape(UPLOT_SCRIPT)}|{re.escape(UPLOT_CSS)})"),
            AssetHandler,
            kwargs,
        ),
    ]


__all__ = ["admin_handlers"]
