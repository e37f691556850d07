"""Who calls the platform service: a hub user identified by hub OAuth, with admin flag and projects."""

from __future__ import annotations

from dataclasses import dataclass, field

from jupyter_server.auth import User
from jupyterhub.singleuser.extension import JupyterHubIdentityProvider
from tornado import web

from . import access
from .directory import HubDirectory


@dataclass
class KPLUser(User):
    """A hub user as the platform sees them: admin flag and projects (their groups)."""

    admin: bool = False
    projects: tuple[str, ...] = field(default=())


class ServiceIdentityProvider(JupyterHubIdentityProvider):
    """Identify the caller with hub OAuth, then read their admin flag and groups from the hub."""

    directory: HubDirectory | None = None

    async def get_user(self, handler: web.RequestHandler) -> KPLUser | None:
        """Return the caller with admin flag and projects, or None."""
        if hasattr(handler, "_kpl_user"):
            return handler._kpl_user
        handler._kpl_user = None
        hub_user = await super().get_user(handler)
        if hub_user is None or hub_user.hub_user.get("kind", "user") != "user":
            return None
        found = await access.member(self.directory, hub_user.username)
        if found is None:
            return None
        handler._kpl_user = KPLUser(
            username=found.name, name=found.name, admin=found.admin, projects=found.projects
        )
        return handler._kpl_user
