"""Which projects a hub user may use: admins every project, members their groups', others the default one.

The one rule of hub mode, used by the platform service (`kpl_lab.hub.service`) for REST
requests and by the gateway process (`kpl_lab.serving.hub_tokens`) for predictions.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import NotFound
from .directory import HubDirectory


@dataclass(frozen=True)
class Member:
    """A hub user as the platform sees them: admin flag and projects (their groups)."""

    name: str
    admin: bool
    projects: tuple[str, ...]


async def member(directory: HubDirectory, name: str) -> Member | None:
    """Return a hub user's admin flag and projects from the hub, or None when the hub has no such user."""
    model = await directory.user(name)
    if model is None:
        return None
    return Member(model["name"], bool(model.get("admin")), tuple(sorted(model.get("groups") or ())))


def may_use_project(user: Member, project: str, default_project: str) -> bool:
    """Let admins use every project and members their groups; any other project does not exist."""
    if user.admin or project in user.projects or (project == default_project and not user.projects):
        return True
    raise NotFound(f"project {project!r} not found", field="project")
