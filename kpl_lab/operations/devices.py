"""Devices: the machine's capacity, its accelerators and what is in use."""

from __future__ import annotations

from sqlalchemy import select

from ..api.devices import Devices
from ..catalog.jobs import Reservation
from .caller import Caller


def devices(caller: Caller) -> Devices:
    """Answer capacity, use (all projects and this one), the project's quota, and each device's holder."""
    platform, project = caller.platform, caller.project
    ledger = platform.jobs.ledger
    with platform.session() as session:
        machine, room = ledger.machine(session), ledger.room(session, project)
        holders = {}
        for row in session.scalars(select(Reservation)):
            for kind, indexes in (row.devices or {}).items():
                for index in indexes:
                    mine = row.project == project
                    holders[(kind, index)] = f"{row.owner_kind}:{row.owner_id}" if mine else "other project"
    found = [
        device.to_json() | {"used_by": holders.get((device.kind, device.index))}
        for kind in sorted(machine.inventory)
        for device in machine.inventory[kind]
    ]
    return Devices(**room, devices=found)
