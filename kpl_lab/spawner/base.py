"""What the KPL spawners share: profiles, the spawn form and one validation of the user's choice."""

from __future__ import annotations

from tornado import web
from traitlets import List, Unicode, default
from traitlets.config import LoggingConfigurable

from ..errors import KPLError
from .form import options_from_form, render_form
from .profiles import Choice, Profile, parse_profiles, resolve
from .quota import hub_quota


def http_error(error: KPLError | ValueError, status: int | None = None) -> web.HTTPError:
    """Return an HTTP error the hub shows as is, on the spawn page and in the REST API."""
    message = getattr(error, "message", None) or str(error)
    http = web.HTTPError(status or getattr(error, "status", 400), message.replace("%", "%%"))
    http.jupyterhub_message = message
    return http


class KPLSpawner(LoggingConfigurable):
    """Profiles, the spawn form and the validated choice, shared by the local and Kubernetes spawners.

    Configure both with `c.KPLSpawner.profiles = [...]`.
    """

    profiles = List(
        help="Notebook profiles: dicts with slug, display_name, description, environment, cpu, cpu_max, "
        "memory, memory_max, shm, shm_max (MB), accelerator (gpu|npu), accelerators, accelerators_max, "
        "projects (group names; empty: all), gpu_sharing, default, node_selector, tolerations."
    ).tag(config=True)

    default_project = Unicode("default", help="The project of users who belong to no group.").tag(config=True)

    @default("options_form")
    def _default_options_form(self):
        return self.render_options_form

    @default("options_from_form")
    def _default_options_from_form(self):
        return options_from_form

    @default("apply_user_options")
    def _default_apply_user_options(self):
        return self.validate_user_options

    def parsed_profiles(self) -> list[Profile]:
        """Return the configured profiles, checked."""
        return parse_profiles(self.profiles)

    def user_projects(self) -> list[str]:
        """Return the user's projects: their groups' names, read now."""
        return sorted(group.name for group in self.user.groups)

    def quota(self, project: str) -> dict:
        """Return the project's quota from its group properties, read now (an admin's edit applies)."""
        try:
            return hub_quota(self.user.groups, project)
        except KPLError as error:
            raise http_error(error, 500) from None

    def choose(self) -> Choice:
        """Validate `user_options` and return the choice; refuse with HTTP 400 and the reason."""
        try:
            return resolve(
                self.user_options, self.parsed_profiles(), self.user_projects(), self.default_project
            )
        except (KPLError, ValueError) as error:
            raise http_error(error, 400) from None

    async def validate_user_options(self, spawner, user_options: dict) -> None:
        """Refuse bad options before anything starts (the hub's apply_user_options hook)."""
        spawner.choose()

    def used_by_project(self, projects: list[str]) -> dict[str, dict]:
        """Return what each project holds now (for the form's quota lines); empty when unknown."""
        return {}

    def render_options_form(self, spawner) -> str:
        """Return the spawn form for this user."""
        projects = self.user_projects() or [self.default_project]
        quotas = {project: self.quota(project) for project in projects}
        return render_form(
            self.parsed_profiles(),
            projects,
            quotas,
            self.used_by_project(projects),
            previous=self.user_options or None,
        )
