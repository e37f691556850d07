"""Notebook profiles and the one validation of a user's choice, from the spawn form or the REST API.

A profile names an environment (locally a Python executable or venv, on Kubernetes an
image), default and maximum cpu, memory and shm, an accelerator kind and count, the
projects that may use it and whether its notebooks share their GPUs. The user's choice
arrives as `user_options` — `{"profile", "project", "cpu", "memory", "shm",
"accelerators"}` — and is checked here whatever its origin, so the API cannot bypass the form.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..api.profiles import Profile
from ..engine.launch import Resources
from ..errors import BadRequest

ACCELERATORS = ("gpu", "npu")
OPTION_KEYS = ("profile", "project", "cpu", "memory", "shm", "accelerators")
SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9\-_]{0,62}$")


@dataclass(frozen=True)
class Choice:
    """A validated choice: the profile, the project and the amounts asked."""

    profile: Profile
    project: str
    cpu: float
    memory: int
    shm: int
    accelerators: int

    @property
    def resources(self) -> Resources:
        """Return the resources to reserve in the ledger."""
        devices = {self.profile.accelerator: self.accelerators} if self.accelerators else {}
        return Resources(cpu=self.cpu, memory=self.memory, shm=self.shm, devices=devices)

    def to_options(self) -> dict:
        """Return the choice as `user_options` (what the hub stores and shows)."""
        return {
            "profile": self.profile.slug,
            "project": self.project,
            "cpu": self.cpu,
            "memory": self.memory,
            "shm": self.shm,
            "accelerators": self.accelerators,
        }


def _number(where: str, value, kind: type, low: float) -> float | int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{where}: expected a number, got {value!r}")
    if not math.isfinite(value) or value < low:
        raise ValueError(f"{where}: expected a number >= {low:g}, got {value!r}")
    if kind is int and value != int(value):
        raise ValueError(f"{where}: expected a whole number, got {value!r}")
    return kind(value)


def parse_profiles(entries: list) -> list[Profile]:
    """Return the profiles of `c.KPL*Spawner.profiles`, naming the entry and field of any mistake."""
    profiles: list[Profile] = []
    known = set(Profile.__dataclass_fields__)
    for position, entry in enumerate(entries):
        where = f"profiles[{position}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: expected a dict, got {type(entry).__name__}")
        unknown = sorted(set(entry) - known)
        if unknown:
            raise ValueError(
                f"{where}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        slug = entry.get("slug")
        if not isinstance(slug, str) or not SLUG_RE.match(slug):
            raise ValueError(f"{where}.slug: expected lowercase letters, digits, '-' or '_', got {slug!r}")
        values = dict(entry)
        for name, kind, low in (
            ("cpu", float, 0.01),
            ("memory", int, 16),
            ("shm", int, 0),
            ("accelerators", int, 0),
        ):
            if name in values:
                values[name] = _number(f"{where}.{name}", values[name], kind, low)
            if f"{name}_max" in values:
                values[f"{name}_max"] = _number(f"{where}.{name}_max", values[f"{name}_max"], kind, low)
            # a maximum defaults to the default, a default to the profile's own default (capped by the maximum)
            default_value = values.get(name, getattr(Profile, name))
            values.setdefault(f"{name}_max", max(default_value, 0))
            values.setdefault(name, min(default_value, values[f"{name}_max"]))
            if values[name] > values[f"{name}_max"]:
                raise ValueError(
                    f"{where}.{name}: default {values[name]:g} is over the maximum {values[f'{name}_max']:g}"
                )
        accelerator = values.get("accelerator", "")
        if accelerator not in ("", *ACCELERATORS):
            raise ValueError(f"{where}.accelerator: expected one of gpu, npu or empty, got {accelerator!r}")
        if not accelerator and values["accelerators_max"]:
            raise ValueError(
                f"{where}.accelerators_max: set 'accelerator' (gpu or npu) to offer accelerators"
            )
        projects = values.get("projects", [])
        if not isinstance(projects, list | tuple) or not all(isinstance(p, str) for p in projects):
            raise ValueError(f"{where}.projects: expected a list of group names")
        values["projects"] = tuple(projects)
        tolerations = values.get("tolerations", [])
        if not isinstance(tolerations, list | tuple) or not all(isinstance(t, dict) for t in tolerations):
            raise ValueError(f"{where}.tolerations: expected a list of dicts")
        values["tolerations"] = tuple(tolerations)
        if not isinstance(values.get("node_selector", {}), dict):
            raise ValueError(f"{where}.node_selector: expected a dict of label: value")
        for name in ("display_name", "description", "environment"):
            if not isinstance(values.get(name, ""), str):
                raise ValueError(f"{where}.{name}: expected a string")
        if any(p.slug == slug for p in profiles):
            raise ValueError(f"{where}.slug: {slug!r} is used by an earlier profile")
        profiles.append(Profile(**values))
    return profiles


def allowed_profiles(profiles: list[Profile], projects: list[str]) -> list[Profile]:
    """Return the profiles at least one of the user's projects may use."""
    return [p for p in profiles if any(p.allows(project) for project in projects)]


def default_profile(profiles: list[Profile]) -> Profile:
    """Return the profile marked default, else the first."""
    return next((p for p in profiles if p.default), profiles[0])


def _option(options: dict, name: str, kind: type, low: float, default: float, maximum: float, slug: str):
    value = options.get(name)
    if value is None or value == "":
        return default
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise BadRequest(f"{name}: expected a number, got {options[name]!r}", field=name) from None
    try:
        value = _number(name, value, kind, low)
    except ValueError as error:
        raise BadRequest(str(error), field=name) from None
    if value > maximum:
        raise BadRequest(f"{name} {value:g} is over the maximum {maximum:g} of profile {slug!r}", field=name)
    return value


def resolve(options: dict, profiles: list[Profile], projects: list[str], default_project: str) -> Choice:
    """Validate `user_options` for a user in `projects` (their groups); refuse with what is wrong."""
    if not isinstance(options, dict):
        raise BadRequest(f"user_options: expected an object, got {type(options).__name__}")
    unknown = sorted(set(options) - set(OPTION_KEYS))
    if unknown:
        raise BadRequest(
            f"unknown option(s) {', '.join(unknown)}; known: {', '.join(OPTION_KEYS)}", field=unknown[0]
        )
    if not profiles:
        raise BadRequest("no notebook profiles are configured (c.KPLSpawner.profiles)")

    project = options.get("project") or ""
    if not isinstance(project, str):
        raise BadRequest(f"project: expected a group name, got {project!r}", field="project")
    if not projects:
        projects = [default_project]
    if not project:
        if len(projects) > 1:
            raise BadRequest(f"choose a project: one of {', '.join(sorted(projects))}", field="project")
        project = projects[0]
    if project not in projects:
        raise BadRequest(f"you are not a member of project {project!r}", field="project")

    slug = options.get("profile") or ""
    if not isinstance(slug, str):
        raise BadRequest(f"profile: expected a profile name, got {slug!r}", field="profile")
    usable = [p for p in profiles if p.allows(project)]
    if not slug:
        if not usable:
            raise BadRequest(f"no profile is available to project {project!r}", field="profile")
        profile = default_profile(usable)
    else:
        profile = next((p for p in profiles if p.slug == slug), None)
        if profile is None:
            names = ", ".join(p.slug for p in usable) or "none"
            raise BadRequest(f"unknown profile {slug!r}: choose one of {names}", field="profile")
        if not profile.allows(project):
            raise BadRequest(
                f"profile {slug!r} is not available to project {project!r} "
                f"(projects: {', '.join(profile.projects)})",
                field="profile",
            )

    return Choice(
        profile=profile,
        project=project,
        cpu=_option(options, "cpu", float, 0.01, profile.cpu, profile.cpu_max, profile.slug),
        memory=_option(options, "memory", int, 16, profile.memory, profile.memory_max, profile.slug),
        shm=_option(options, "shm", int, 0, profile.shm, profile.shm_max, profile.slug),
        accelerators=_option(
            options, "accelerators", int, 0, profile.accelerators, profile.accelerators_max, profile.slug
        ),
    )
