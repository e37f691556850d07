"""The spawn form: only the profiles and projects a user may pick, inputs capped by profile, machine and quota."""

from __future__ import annotations

from html import escape

from ..fit import KINDS, fit_now, room
from .profiles import OPTION_KEYS, Profile, default_profile
from .quota import amount

FIELDS = (  # user option, label, step, unit, what limits it (None: the profile's accelerator kind)
    ("cpu", "CPUs", "0.1", "", "cpu"),
    ("memory", "Memory", "1", "MB", "memory"),
    ("shm", "Shared memory (/dev/shm)", "1", "MB", ""),
    ("accelerators", "Accelerators", "1", "", None),
)


# one field a line, indented under its profile's radio button
STYLE = (
    "<style>.kpl-profile { border: 1px solid #ddd; border-radius: 4px; padding: .5em 1em; margin: .5em 0; }"
    " .kpl-profile .kpl-field { display: block; margin: .3em 0 0 1.5em; }"
    " .kpl-profile .kpl-field input { width: 7em; }"
    " .kpl-profile .kpl-note { margin: .3em 0 0 1.5em; color: #666; font-size: 90%; }</style>"
)


def _kind(profile: Profile, limited_by: str | None) -> str:
    return profile.accelerator if limited_by is None else limited_by


def _cap(profile: Profile, name: str, kind: str, rooms: dict[str, dict]) -> float:
    """Return the largest value the form offers: the least of the profile maximum, the machine and the quota.

    With several projects, the one that may have the most (the form's project can change).
    """
    maximum = getattr(profile, f"{name}_max")
    if not kind:
        return maximum
    most = [room(rooms[p])[kind][1] for p in rooms if profile.allows(p) and kind in KINDS]
    if most:
        maximum = min(maximum, max(most))
    return int(maximum) if name != "cpu" else round(float(maximum), 2)


def _defaults(profile: Profile, project_room: dict) -> tuple[dict[str, float], list[str]]:
    """Return the profile's defaults capped at what the project has free now, with notes (`kpl_lab.fit`)."""
    asked = {"cpu": profile.cpu, "memory": profile.memory}
    if profile.accelerator:
        asked[profile.accelerator] = profile.accelerators
    fitted, notes = fit_now(asked, project_room, asker=f"profile {profile.slug}")
    values = {
        "cpu": profile.cpu,
        "memory": profile.memory,
        "shm": profile.shm,
        "accelerators": profile.accelerators,
    }
    values["cpu"] = fitted.get("cpu", values["cpu"])
    values["memory"] = fitted.get("memory", values["memory"])
    if profile.accelerator:
        values["accelerators"] = fitted.get(profile.accelerator, values["accelerators"])
    return values, notes


def _held(kind: str, held: dict) -> float:
    return held.get(kind, 0) if kind in ("cpu", "memory") else len((held.get("devices") or {}).get(kind, ()))


def _quota_line(project: str, project_room: dict) -> str:
    quota = project_room.get("quota") or {}
    if not quota:
        return f"<li><b>{escape(project)}</b>: no quota</li>"
    used = project_room.get("project_used") or {}
    parts = []
    for key, value in sorted(quota.items()):
        held = project_room.get("notebooks", 0) if key == "notebooks" else _held(key, used)
        parts.append(f"{escape(key)} {held:g} of {value:g} in use")
    return f"<li><b>{escape(project)}</b>: {', '.join(parts)}</li>"


def _machine_line(project_room: dict) -> str:
    capacity, used = project_room.get("capacity"), project_room.get("used") or {}
    if not capacity:
        return ""
    parts = [
        f"{_held(kind, used):g} of {amount(kind, _held(kind, capacity))}"
        for kind in KINDS
        if _held(kind, capacity)
    ]
    return f"<li>this machine: {', '.join(parts)} in use</li>"


def render_form(
    profiles: list[Profile],
    projects: list[str],
    rooms: dict[str, dict],
    previous: dict | None = None,
) -> str:
    """Return the HTML of the spawn form for a user in `projects` (only the profiles they may use).

    `rooms`: each project's `Ledger.room` (capacity, use, quota; no capacity where the machine
    is unknown), and `notebooks`, how many it runs.
    """
    previous = previous or {}
    chosen_project = previous.get("project") if previous.get("project") in projects else projects[0]
    usable = [p for p in profiles if any(p.allows(project) for project in projects)]
    if not usable:
        return '<p class="kpl-no-profile">No notebook profile is available to your projects.</p>'
    chosen = next((p for p in usable if p.slug == previous.get("profile")), default_profile(usable))
    html = ['<div class="kpl-spawn-form">', STYLE]
    html.append('<div class="form-group"><label for="kpl-project">Project</label>')
    html.append('<select class="form-control" id="kpl-project" name="project">')
    for project in projects:
        selected = " selected" if project == chosen_project else ""
        html.append(f'<option value="{escape(project)}"{selected}>{escape(project)}</option>')
    html.append("</select></div>")
    html.append('<ul class="kpl-quotas">')
    html.extend(_quota_line(p, rooms.get(p, {})) for p in projects)
    html.append(_machine_line(rooms.get(chosen_project, {})))
    html.append("</ul>")
    for profile in usable:
        slug = escape(profile.slug)
        checked = " checked" if profile is chosen else ""
        only = f" (projects: {escape(', '.join(profile.projects))})" if profile.projects else ""
        html.append(f'<fieldset class="kpl-profile" data-profile="{slug}">')
        html.append(
            f'<label><input type="radio" name="profile" value="{slug}"{checked}> '
            f"<b>{escape(profile.title)}</b>{only}</label>"
        )
        if profile.description:
            html.append(f'<p class="kpl-description">{escape(profile.description)}</p>')
        values, notes = _defaults(profile, rooms.get(chosen_project, {}))
        for name, label, step, unit, limited_by in FIELDS:
            if name == "accelerators":
                if not profile.accelerator or not profile.accelerators_max:
                    continue
                label = f"{profile.accelerator.upper()}s" + (" (shared)" if profile.gpu_sharing else "")
            maximum = _cap(profile, name, _kind(profile, limited_by), rooms)
            value = min(values[name], maximum)
            value = int(value) if name != "cpu" else round(float(value), 2)
            if profile is chosen and name in previous:
                value = previous[name]
            low = "0" if name in ("shm", "accelerators") else step
            html.append(
                f'<label class="kpl-field">{escape(label)} <input type="number" name="{slug}-{name}" value="{escape(str(value))}" '
                f'min="{low}" max="{maximum:g}" step="{step}"> {f"{unit} " if unit else ""}(max {maximum:g})</label>'
            )
        html.extend(f'<p class="kpl-note">{escape(note)}</p>' for note in notes)
        html.append("</fieldset>")
    html.append("</div>")
    return "\n".join(html)


def options_from_form(form: dict[str, list[str]]) -> dict:
    """Turn posted form data into `user_options`: the chosen profile's fields, numbers as numbers.

    The fields of the profiles not chosen are the form's own and are left out; any other field
    passes through as posted, for the start's validation to refuse by name.
    """
    options: dict = {}
    for key in ("profile", "project"):
        if form.get(key):
            options[key] = form[key][0]
    slug = options.get("profile", "")
    for key, values in form.items():
        if key in ("profile", "project"):
            continue
        owner, _, name = key.rpartition("-")
        if not owner or name not in OPTION_KEYS[2:]:
            options[key] = values
            continue
        if owner != slug or not values or values[0] == "":
            continue
        text = values[0]
        try:
            number = float(text)
        except ValueError:
            options[name] = text  # left for validation to refuse with the field's name
            continue
        options[name] = int(number) if number.is_integer() and name != "cpu" else number
    return options
