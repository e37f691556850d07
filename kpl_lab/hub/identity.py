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

    async def hub_model(self, handler: web.RequestHandler) -> dict | None:
        """Return the hub's model of the caller's token or cookie (a user's or a service's, with its scopes), or None."""
        found = await super().get_user(handler)
        return None if found is None else found.hub_user

    async def get_user(self, handler: web.RequestHandler) -> KPLUser | None:
        """Return the caller with admin flag and projects, or None."""
        if hasattr(handler, "_kpl_user"):
            return handler._kpl_user
        handler._kpl_user = None
        hub_user = await self.hub_model(handler)
        if hub_user is None or hub_user.get("kind", "user") != "user":
            return None
        found = await access.member(self.directory, hub_user["name"])
        if found is None:
            return None
        handler._kpl_user = KPLUser(
            username=found.name, name=found.name, admin=found.admin, projects=found.projects
        )
        return handler._kpl_user
