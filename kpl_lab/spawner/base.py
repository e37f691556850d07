"""What the KPL spawners share: profiles, the spawn form and one validation of the user's choice."""

from __future__ import annotations

from dataclasses import replace

from tornado import web
from traitlets import List, Unicode, default
from traitlets.config import LoggingConfigurable

from ..errors import KPLError
from ..fit import fit_now
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

    def room(self, project: str) -> dict:
        """Return what the project may have now (`Ledger.room`); here its quota alone: the machine is unknown."""
        return {"quota": self.quota(project)}

    def fit_choice(self, choice: Choice) -> Choice:
        """Return the choice with the amounts the user left out capped at what is free now (`kpl_lab.fit`).

        The form's fields start so; a spawn through the REST API that names no amounts gets the same.
        """
        accelerator = choice.profile.accelerator
        options = self.user_options or {}
        given = {
            accelerator if name == "accelerators" else name: options[name]
            for name in ("cpu", "memory", "accelerators")
            if options.get(name) not in (None, "")
        }
        asked = {"cpu": choice.cpu, "memory": choice.memory}
        if accelerator:
            asked[accelerator] = choice.accelerators
        fitted, notes = fit_now(
            asked, self.room(choice.project), given=given, asker=f"profile {choice.profile.slug}"
        )
        for note in notes:
            self.log.info("%s: %s", self._log_name, note)
        return replace(
            choice,
            cpu=fitted.get("cpu", choice.cpu),
            memory=int(fitted.get("memory", choice.memory)),
            accelerators=int(fitted.get(accelerator, choice.accelerators))
            if accelerator
            else choice.accelerators,
        )

    def render_options_form(self, spawner) -> str:
        """Return the spawn form for this user."""
        projects = self.user_projects() or [self.default_project]
        return render_form(
            self.parsed_profiles(),
            projects,
            {project: self.room(project) for project in projects},
            previous=self.user_options or None,
        )
