"""Notebook profiles: read by every spawn form and spawn; administrators replace them."""

from __future__ import annotations

import dataclasses

from tornado import web

from ...api.profiles import Profiles, ProfilesRequest
from ...catalog.rules import MACHINE, PROFILES
from ...errors import BadRequest
from ...spawner.profiles import parse_profiles
from ..base import KPLHandler


def checked(entries: list) -> list:
    """Return the profiles of `entries`, refusing a mistake with the entry and field it is in."""
    try:
        return parse_profiles(entries)
    except ValueError as error:  # "profiles[2].cpu: ..." names the field
        raise BadRequest(str(error), field=str(error).split(":", 1)[0]) from None


class ProfilesHandler(KPLHandler):
    """GET: the profiles; PUT (administrators): replace them, in effect at the next spawn."""

    @web.authenticated
    async def get(self) -> None:
        """Answer the profiles."""
        found = await self.blocking(self.platform.jobs.ledger.rules.read, PROFILES, MACHINE, [])
        self.reply(Profiles(profiles=checked(found)))

    @web.authenticated
    async def put(self) -> None:
        """Replace every profile."""
        self.check_admin("change the notebook profiles")
        profiles = checked(self.body_as(ProfilesRequest).profiles)
        entries = [dataclasses.asdict(profile) for profile in profiles]
        await self.blocking(self.platform.jobs.ledger.rules.set, PROFILES, MACHINE, entries)
        self.reply(Profiles(profiles=profiles))
