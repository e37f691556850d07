"""Notebooks in the platform ledger, within their project's quota; the hub's group properties loaded as quotas.

A project is a group; its quota is a rule of the platform's (`kpl_lab.catalog.rules`), which
the hub's group property `kpl_quota` (e.g. `{"cpu": 8, "memory": 16384, "gpu": 2, "npu": 0,
"notebooks": 3}`; a missing key is not limited) loads when it changes (`load_hub_quotas`,
at each spawn and each round of the service), and which the admin page, the REST API and
`kpl-lab project quota` edit. It is read at each start, so an edit applies to the next spawn.
A notebook reserves under owner kind "notebook" inside the ledger's lock, so simultaneous
starts never over-allocate.

GPU sharing: a reservation made by a sharing profile records `"shared": [kind]` next to
its device indexes; another sharing notebook may be given the same index, an exclusive
job or notebook may not. A project's accelerators count once however many notebooks share them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ..catalog.jobs import Reservation
from ..catalog.rules import QUOTA, Rules, check_quota
from ..engine.launch import Resources
from ..engine.ledger import Ledger, Machine
from ..errors import Conflict, Forbidden, KPLError

QUOTA_PROPERTY = "kpl_quota"
OWNER_KIND = "notebook"
SHARED = "shared"
UNITS = {"cpu": ("CPU", "CPUs"), "memory": ("MB of memory", "MB of memory"), "gpu": ("GPU", "GPUs")}
UNITS |= {"npu": ("NPU", "NPUs"), "notebooks": ("notebook", "notebooks")}


class QuotaExceeded(Forbidden):
    """A start would take the project over its quota."""


class MachineFull(Conflict):
    """The machine has not enough free cpu, memory or devices now."""


class Group(Protocol):
    name: str
    properties: dict


def amount(kind: str, count: float) -> str:
    """Return a count with its unit, as people read it: 1 CPU, 2 GPUs, 512 MB of memory."""
    one, many = UNITS.get(kind, (kind, kind))
    return f"{count:g} {one if count == 1 else many}"


def hub_quota(groups: Iterable[Group], project: str) -> dict[str, float]:
    """Return the quota in the group properties of `project` (empty: not limited); BadRequest naming the key."""
    for group in groups:
        if group.name == project:
            quota = (group.properties or {}).get(QUOTA_PROPERTY)
            return check_quota(quota, f"group {project!r} properties.{QUOTA_PROPERTY}")
    return {}


def load_hub_quotas(rules: Rules, groups: Iterable[Group]) -> list[str]:
    """Load the hub groups' `kpl_quota` properties into the platform's quota rules (those that changed).

    Return the refusals of properties that are no quota (the group and key named); those
    groups' rules stay as they were.
    """
    refused = []
    for group in groups:
        if (group.properties or {}).get(QUOTA_PROPERTY) is None:
            continue
        try:
            rules.load(QUOTA, group.name, hub_quota([group], group.name))
        except KPLError as error:
            refused.append(error.message)
    return refused


def _refusal(project: str, kind: str, asked: float, used: float, allowed: float) -> QuotaExceeded:
    return QuotaExceeded(
        f"asks {amount(kind, asked)}; project {project} allows {allowed:g}, {used:g} in use",
        field=kind,
    )


def _shared_kinds(reservation: Reservation) -> set[str]:
    return set((reservation.devices or {}).get(SHARED, ()))


def _pick_shared(session: Session, machine: Machine, kind: str, count: int) -> list[int] | None:
    """Return `count` devices for a sharing notebook: least-shared shared ones first, then free ones."""
    sharers: dict[int, int] = {}
    exclusive: set[int] = set()
    for reservation in session.scalars(select(Reservation)):
        indexes = (reservation.devices or {}).get(kind, ())
        for index in indexes:
            if kind in _shared_kinds(reservation):
                sharers[index] = sharers.get(index, 0) + 1
            else:
                exclusive.add(index)
    known = [d.index for d in machine.inventory.get(kind, [])]
    shared = sorted((n, i) for i, n in sharers.items() if i not in exclusive and i in known)
    free = [i for i in known if i not in sharers and i not in exclusive]
    picked = [i for _, i in shared][:count]
    picked += free[: count - len(picked)]
    return picked if len(picked) == count else None


def _machine_refusal(session: Session, ledger: Ledger, resources: Resources) -> MachineFull:
    held, machine = ledger.usage(session), ledger.machine(session)
    capacity = {"cpu": machine.cpu, "memory": machine.memory}
    used = {"cpu": held.cpu, "memory": held.memory}
    for kind, devices in machine.inventory.items():
        capacity[kind], used[kind] = len(devices), len(held.devices.get(kind, ()))
    asked = {"cpu": resources.cpu, "memory": resources.memory, **resources.devices}
    for kind, count in asked.items():
        if count and used.get(kind, 0) + count > capacity.get(kind, 0) + 1e-9:
            return MachineFull(
                f"the machine is busy: asks {amount(kind, count)}, "
                f"{used.get(kind, 0):g} of {capacity.get(kind, 0):g} in use; try again later",
                field=kind,
            )
    return MachineFull("the machine is busy: no free device fits; try again later")


def count_notebooks(session: Session, project: str) -> int:
    """Return how many notebooks of the project hold a reservation."""
    return session.scalar(
        select(func.count())
        .select_from(Reservation)
        .where(Reservation.project == project, Reservation.owner_kind == OWNER_KIND)
    )


def try_reserve_notebook(
    session: Session,
    ledger: Ledger,
    project: str,
    owner_id: str,
    resources: Resources,
    sharing: bool = False,
) -> Reservation:
    """Reserve in a locked session, or raise QuotaExceeded / MachineFull saying used, asked and allowed."""
    # a notebook being started holds nothing: whatever is still recorded is stale
    ledger.release(OWNER_KIND, owner_id, session)
    quota = ledger.quota(session, project)
    mine = ledger.usage(session, project)
    running = count_notebooks(session, project)
    if "notebooks" in quota and running + 1 > quota["notebooks"]:
        raise _refusal(project, "notebooks", 1, running, quota["notebooks"])
    for kind, used, asked in (("cpu", mine.cpu, resources.cpu), ("memory", mine.memory, resources.memory)):
        if kind in quota and used + asked > quota[kind] + 1e-9:
            raise _refusal(project, kind, asked, used, quota[kind])

    picked: dict[str, list[int]] = {}
    if sharing:
        held, machine = ledger.usage(session), ledger.machine(session)
        if held.cpu + resources.cpu > machine.cpu + 1e-9 or held.memory + resources.memory > machine.memory:
            raise _machine_refusal(session, ledger, resources)
        for kind, count in resources.devices.items():
            if count:
                indexes = _pick_shared(session, machine, kind, count)
                if indexes is None:
                    raise _machine_refusal(session, ledger, resources)
                picked[kind] = indexes
    else:
        for kind, count in resources.devices.items():
            # exclusive devices: the ledger picks them below; count them for the quota now
            if count:
                picked[kind] = [-1] * count
    for kind, indexes in picked.items():
        if kind not in quota:
            continue
        held_by_project = mine.devices.get(kind, set())
        asked = len(set(indexes) - held_by_project) if sharing else len(indexes)
        if len(held_by_project) + asked > quota[kind] + 1e-9:
            raise _refusal(project, kind, len(indexes), len(held_by_project), quota[kind])

    if sharing:
        devices: dict[str, list] = dict(picked)
        if picked:
            devices[SHARED] = sorted(picked)
        reservation = Reservation(
            project=project,
            owner_kind=OWNER_KIND,
            owner_id=owner_id,
            cpu=resources.cpu,
            memory=resources.memory,
            devices=devices,
        )
        session.add(reservation)
        session.flush()
        return reservation
    reservation = ledger.try_reserve(session, project, OWNER_KIND, owner_id, resources)
    if reservation is None:
        raise _machine_refusal(session, ledger, resources)
    return reservation


def reserve_notebook(
    ledger: Ledger,
    project: str,
    owner_id: str,
    resources: Resources,
    sharing: bool = False,
) -> Reservation:
    """Check the request could ever fit, then reserve it in a transaction of its own."""
    ledger.check(project, resources)
    with ledger.locked() as session:
        return try_reserve_notebook(session, ledger, project, owner_id, resources, sharing)


def release_notebook(ledger: Ledger, owner_id: str) -> None:
    """Give back what a notebook holds (nothing held is fine)."""
    ledger.release(OWNER_KIND, owner_id)


def devices_of(reservation_devices: dict) -> dict[str, list[int]]:
    """Return the device indexes by kind of a reservation, without the sharing marker."""
    return {kind: list(indexes) for kind, indexes in (reservation_devices or {}).items() if kind != SHARED}
