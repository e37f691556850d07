"""The platform's rules an administrator edits: a project's quota and the notebook profiles."""

from __future__ import annotations

import dataclasses

from ..api.profiles import Profiles, ProfilesRequest
from ..api.quotas import Quota, QuotaLimits, QuotaRequest
from ..catalog.rules import MACHINE, PROFILES, QUOTA
from ..errors import BadRequest, Forbidden
from ..spawner.profiles import parse_profiles
from .caller import Caller


def require_admin(caller: Caller, what: str) -> None:
    """Refuse a caller who is not an administrator (whoever opens a home, or a single-user server's owner, is)."""
    if not caller.is_admin:
        raise Forbidden(f"only an administrator may {what}")


def quota(caller: Caller) -> Quota:
    """Answer the project's quota."""
    found = caller.platform.jobs.ledger.rules.read(QUOTA, caller.project, {})
    return Quota(project=caller.project, quota=QuotaLimits(**found))


def set_quota(caller: Caller, body: QuotaRequest) -> Quota:
    """Replace the project's quota (a missing limit: not limited); every next reservation decides with it."""
    require_admin(caller, "change a project's quota")
    limits = body.model_dump(exclude_none=True)
    caller.platform.jobs.ledger.rules.set(QUOTA, caller.project, limits)
    return Quota(project=caller.project, quota=QuotaLimits(**limits))


def checked(entries: list) -> list:
    """Return the profiles of `entries`, refusing a mistake with the entry and field it is in."""
    try:
        return parse_profiles(entries)
    except ValueError as error:  # "profiles[2].cpu: ..." names the field
        raise BadRequest(str(error), field=str(error).split(":", 1)[0]) from None


def profiles(caller: Caller) -> Profiles:
    """Answer the notebook profiles."""
    return Profiles(profiles=checked(caller.platform.jobs.ledger.rules.read(PROFILES, MACHINE, [])))


def set_profiles(caller: Caller, body: ProfilesRequest) -> Profiles:
    """Replace every notebook profile, in effect at the next spawn."""
    require_admin(caller, "change the notebook profiles")
    found = checked(body.profiles)
    caller.platform.jobs.ledger.rules.set(PROFILES, MACHINE, [dataclasses.asdict(p) for p in found])
    return Profiles(profiles=found)
