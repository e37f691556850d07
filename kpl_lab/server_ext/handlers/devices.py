"""Devices: the machine's capacity, its accelerators and what is in use."""

from __future__ import annotations

from sqlalchemy import select
from tornado import web

from ...api.devices import Devices
from ...catalog.jobs import Reservation
from ..base import KPLHandler


def devices_model(platform, project: str) -> Devices:
    """Return capacity, use (all projects and this one), the project's quota, and each device's holder."""
    ledger = platform.jobs.ledger
    with platform.session() as session:
        machine, room = ledger.machine(session), ledger.room(session, project)
        holders = {}
        for row in session.scalars(select(Reservation)):
            for kind, indexes in (row.devices or {}).items():
                for index in indexes:
                    mine = row.project == project
                    holders[(kind, index)] = f"{row.owner_kind}:{row.owner_id}" if mine else "other project"
    devices = [
        device.to_json() | {"used_by": holders.get((device.kind, device.index))}
        for kind in sorted(machine.inventory)
        for device in machine.inventory[kind]
    ]
    return Devices(**room, devices=devices)


class DevicesHandler(KPLHandler):
    """GET: the device inventory and use."""

    @web.authenticated
    async def get(self) -> None:
        """Answer the inventory."""
        self.reply(await self.blocking(devices_model, self.platform, self.project))
