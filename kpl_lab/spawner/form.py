"""The spawn form: only the profiles and projects a user may pick, inputs capped by profile and quota."""

from __future__ import annotations

from html import escape

from .profiles import OPTION_KEYS, Profile, default_profile

FIELDS = (  # user option, label, step, unit, quota key (None: accelerator kind)
    ("cpu", "CPUs", "0.1", "", "cpu"),
    ("memory", "Memory", "1", "MB", "memory"),
    ("shm", "Shared memory (/dev/shm)", "1", "MB", ""),
    ("accelerators", "Accelerators", "1", "", None),
)


# one field a line, indented under its profile's radio button
STYLE = (
    "<style>.kpl-profile { border: 1px solid #ddd; border-radius: 4px; padding: .5em 1em; margin: .5em 0; }"
    " .kpl-profile .kpl-field { display: block; margin: .3em 0 0 1.5em; }"
    " .kpl-profile .kpl-field input { width: 7em; }</style>"
)


def _cap(profile: Profile, name: str, quota_key: str | None, quotas: dict[str, dict]) -> float:
    """Return the largest value the form offers: the profile maximum, lowered by the largest project quota."""
    maximum = getattr(profile, f"{name}_max")
    key = profile.accelerator if quota_key is None else quota_key
    limits = [
        quota[key] for project, quota in quotas.items() if profile.allows(project) and key and key in quota
    ]
    if limits and len(limits) == len([p for p in quotas if profile.allows(p)]):
        maximum = min(maximum, max(limits))
    return maximum


def _start_value(
    profile: Profile,
    name: str,
    quota_key: str | None,
    maximum: float,
    quotas: dict[str, dict],
    used: dict[str, dict],
    project: str,
) -> float:
    """Return the value a field starts at: the profile default, within the cap and what the project has free."""
    value = min(getattr(profile, name), maximum)
    key = profile.accelerator if quota_key is None else quota_key
    quota = quotas.get(project, {})
    if key and key in quota and profile.allows(project):
        free = quota[key] - used.get(project, {}).get(key, 0)
        if free > 0:
            value = min(value, free)
    return int(value) if name != "cpu" else round(float(value), 2)


def _quota_line(project: str, quota: dict, used: dict) -> str:
    if not quota:
        return f"<li><b>{escape(project)}</b>: no quota</li>"
    parts = [
        f"{escape(key)} {used.get(key, 0):g} of {value:g} in use" for key, value in sorted(quota.items())
    ]
    return f"<li><b>{escape(project)}</b>: {', '.join(parts)}</li>"


def render_form(
    profiles: list[Profile],
    projects: list[str],
    quotas: dict[str, dict],
    used: dict[str, dict],
    previous: dict | None = None,
) -> str:
    """Return the HTML of the spawn form for a user in `projects` (only the profiles they may use)."""
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
    html.extend(_quota_line(p, quotas.get(p, {}), used.get(p, {})) for p in projects)
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
        for name, label, step, unit, quota_key in FIELDS:
            if name == "accelerators":
                if not profile.accelerator or not profile.accelerators_max:
                    continue
                label = f"{profile.accelerator.upper()}s" + (" (shared)" if profile.gpu_sharing else "")
            maximum = _cap(profile, name, quota_key, quotas)
            value = _start_value(profile, name, quota_key, maximum, quotas, used, chosen_project)
            if profile is chosen and name in previous:
                value = previous[name]
            low = "0" if name in ("shm", "accelerators") else step
            html.append(
                f'<label class="kpl-field">{escape(label)} <input type="number" name="{slug}-{name}" value="{escape(str(value))}" '
                f'min="{low}" max="{maximum:g}" step="{step}"> {unit} (max {maximum:g})</label>'
            )
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
