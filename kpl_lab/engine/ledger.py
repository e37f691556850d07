"""The resource ledger: what this machine has, what each job or notebook holds, and project quotas.

Every change happens in a transaction that first takes the platform's write lock
(`Platform.session(immediate=True)`: SQLite's BEGIN IMMEDIATE; PostgreSQL's
SELECT ... FOR UPDATE of the single `ledger_lock` row), so two reservations never both
see the same free resources, whether they come from threads, job supervisors, other
servers or the hub's spawner. Devices are reserved by index, so a job knows which GPU
is its own.

Why a row lock and not SERIALIZABLE with retry: a reservation reads every reservation
(the machine's capacity is one pool shared by all projects, so a per-project row would
not protect it) and a burst of submits all contend for that same pool. Under
SERIALIZABLE all but one of them would abort and retry, every caller (scheduler,
spawner, release) would need a retry loop, and the work thrown away grows with the
burst; the lock queues them instead, each transaction is short (a few milliseconds),
and it behaves exactly as SQLite's one writer at a time, on which the rest of the
platform's read-then-write code already relies.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import psutil
from sqlalchemy import delete, select
from sqlalchemy.orm import Session
from traitlets import Dict, Float, Integer, default
from traitlets.config import LoggingConfigurable

from ..catalog.jobs import Reservation
from ..catalog.rules import CAPACITY, MACHINE, QUOTA, Rules, check_quota, digest
from ..errors import BadRequest
from .devices import Device, discover
from .launch import Resources

if TYPE_CHECKING:
    from ..platform import Platform

DEVICE_WORDS = {"gpu": "GPU", "npu": "NPU"}


def _amount(kind: str, count: float) -> str:
    if kind == "cpu":
        return f"{count:g} CPU" + ("" if count == 1 else "s")
    if kind == "memory":
        return f"{count:g} MB of memory"
    word = DEVICE_WORDS.get(kind, kind)
    return f"{count:g} {word}" + ("" if count == 1 else "s")


@dataclass
class Usage:
    """Resources held: cpu, memory MB, and device indexes by kind."""

    cpu: float = 0.0
    memory: int = 0
    devices: dict[str, set[int]] = field(default_factory=dict)

    def add(self, reservation: Reservation) -> None:
        self.cpu += reservation.cpu
        self.memory += reservation.memory
        for kind, indexes in (reservation.devices or {}).items():
            self.devices.setdefault(kind, set()).update(indexes)

    def to_json(self) -> dict:
        return {
            "cpu": self.cpu,
            "memory": self.memory,
            "devices": {k: sorted(v) for k, v in self.devices.items()},
        }


@dataclass
class Machine:
    """What jobs and notebooks may hold in all: CPUs, memory (MB) and accelerators by kind."""

    cpu: float
    memory: int
    inventory: dict[str, list[Device]]

    def capacity(self) -> dict:
        """Return the total cpu, memory and device indexes by kind."""
        return {
            "cpu": self.cpu,
            "memory": self.memory,
            "devices": {kind: [d.index for d in devices] for kind, devices in self.inventory.items()},
        }


class Ledger(LoggingConfigurable):
    """Reserve and release cpu, memory and devices for jobs and notebooks, within capacity and quotas.

    It decides with the rules in the catalog database (`kpl_lab.catalog.rules`), read at each
    decision: the machine's capacity and the projects' quotas. Its settings are what a host
    (the hub's service, a single-user server) and the hub's spawner load into those rules
    (`load_config`); where no process declared the capacity, each falls back to its own view
    of the machine.
    """

    cpu = Float(help="CPUs jobs and notebooks may hold in all; default: this machine's cores.").tag(
        config=True
    )
    memory = Integer(help="Memory (MB) jobs and notebooks may hold in all; default: this machine's.").tag(
        config=True
    )
    devices = Dict(
        help='Declared accelerators, e.g. {"gpu": [{"index": 0, "name": "A100", "memory_mb": 40960}]}; '
        "empty: discover them (NVML, npu-smi)."
    ).tag(config=True)
    quotas = Dict(
        help='Project quotas, e.g. {"vision": {"cpu": 8, "memory": 32768, "gpu": 2}}; a missing '
        "project or key is not limited. Loaded into the platform's rules at a host's start; edit them "
        "live on the admin page, through the REST API or with `kpl-lab project quota`."
    ).tag(config=True)

    @default("cpu")
    def _default_cpu(self) -> float:
        return float(os.cpu_count() or 1)

    @default("memory")
    def _default_memory(self) -> int:
        return int(psutil.virtual_memory().total // (1024 * 1024))

    def __init__(self, platform: Platform, **kwargs) -> None:
        super().__init__(parent=platform, **kwargs)
        self.platform = platform
        self.rules = Rules(platform)
        self._seeded = False
        self._seeding = threading.Lock()
        self._inventories: dict[str, dict[str, list[Device]]] = {}  # declared devices' digest -> found

    def load_config(self) -> None:
        """Load this process's settings (capacity, quotas) into the platform's rules: a host's start.

        Only the capacity settings configured here load: a process that leaves them to their
        defaults (the hub's service, when the hub's configuration declares the machine for
        its spawner) must not replace another's declared capacity with its own view.
        """
        configured = self.config.get("Ledger", {})
        capacity = {key: getattr(self, key) for key in ("cpu", "memory", "devices") if key in configured}
        if capacity:
            self.rules.load(CAPACITY, MACHINE, capacity)
        for project, quota in self.quotas.items():
            self.rules.load(QUOTA, project, check_quota(quota, f"c.Ledger.quotas.{project}"))
        self._seeded = True

    def seed(self) -> None:
        """Load this process's settings into rules that nobody wrote yet (a home no host has opened)."""
        if self._seeded:
            return
        with self._seeding:  # another thread of this process may be half-way through: its quotas come after
            if not self._seeded:
                if self.rules.read(CAPACITY) is None:
                    self.load_config()
                self._seeded = True

    def machine(self, session: Session | None = None) -> Machine:
        """Return the machine's capacity as the rules say (this process's settings where none does)."""
        if session is None:
            self.seed()
            with self.platform.session() as session:
                return self.machine(session)
        found = self.rules.get(session, CAPACITY) or {}
        declared = found.get("devices", self.devices) or {}
        key = digest(declared)
        if key not in self._inventories:
            self._inventories[key] = discover(declared)
        return Machine(
            float(found.get("cpu", self.cpu)), int(found.get("memory", self.memory)), self._inventories[key]
        )

    def quota(self, session: Session, project: str) -> dict[str, float]:
        """Return a project's quota as the rules say (empty: not limited)."""
        return self.rules.get(session, QUOTA, project) or {}

    def capacity(self) -> dict:
        """Return the total cpu, memory and device indexes by kind."""
        return self.machine().capacity()

    def room(self, session: Session, project: str) -> dict:
        """Return what a project may have: capacity, what all projects and it hold, its quota (`kpl_lab.fit.room`)."""
        return {
            "capacity": self.machine(session).capacity(),
            "used": self.usage(session).to_json(),
            "project_used": self.usage(session, project).to_json(),
            "quota": self.quota(session, project) or None,
        }

    def check(self, project: str, resources: Resources, session: Session | None = None) -> None:
        """Refuse a request that could never fit: larger than the machine or the project quota.

        A job of several workers asks its amounts once per worker. `session`: the caller's
        transaction (one holding the lock must not wait for a second connection).
        """
        each = {"cpu": resources.cpu, "memory": resources.memory, **resources.devices}
        for kind, count in each.items():
            if count and count < 0:
                raise BadRequest(f"asks {_amount(kind, count)}: amounts cannot be negative", field=kind)
        workers = max(1, resources.workers)
        asked = {kind: count * workers for kind, count in each.items()}
        self.seed()

        def asks(kind: str) -> str:
            if workers == 1:
                return f"asks {_amount(kind, asked[kind])}"
            return f"asks {_amount(kind, asked[kind])} ({workers} workers × {_amount(kind, each[kind])})"

        with self.platform.session() if session is None else nullcontext(session) as session:
            found, quota = self.machine(session), self.quota(session, project)
        machine = {"cpu": found.cpu, "memory": found.memory}
        machine.update({kind: len(devices) for kind, devices in found.inventory.items()})
        for kind, count in asked.items():
            if count and count > machine.get(kind, 0):
                raise BadRequest(f"{asks(kind)}; this machine has {machine.get(kind, 0):g}", field=kind)
        for kind, count in asked.items():
            if count and kind in quota and count > quota[kind]:
                raise BadRequest(
                    f"{asks(kind)}; project {project} allows {quota[kind]:g}",
                    field=kind,
                )

    @contextmanager
    def locked(self):
        """Yield a session holding the write lock (and so the ledger) until it commits."""
        self.seed()
        with self.platform.session(immediate=True) as session:
            yield session

    def usage(self, session: Session, project: str | None = None) -> Usage:
        """Return what is held, on the whole machine or by one project."""
        query = select(Reservation)
        if project is not None:
            query = query.where(Reservation.project == project)
        usage = Usage()
        for reservation in session.scalars(query):
            usage.add(reservation)
        return usage

    def try_reserve(
        self, session: Session, project: str, owner_kind: str, owner_id: str, resources: Resources
    ) -> Reservation | None:
        """Reserve in a locked session; None when it does not fit now (machine or quota).

        A job of several workers holds its amounts once per worker.
        """
        resources = resources.total()
        machine = self.machine(session)
        held = self.usage(session)
        if held.cpu + resources.cpu > machine.cpu + 1e-9 or held.memory + resources.memory > machine.memory:
            return None
        picked: dict[str, list[int]] = {}
        for kind, count in resources.devices.items():
            if not count:
                continue
            taken = held.devices.get(kind, set())
            free = [d.index for d in machine.inventory.get(kind, []) if d.index not in taken]
            if len(free) < count:
                return None
            picked[kind] = free[:count]
        quota = self.quota(session, project)
        if quota:
            mine = self.usage(session, project)
            wants = {"cpu": mine.cpu + resources.cpu, "memory": mine.memory + resources.memory}
            for kind, count in resources.devices.items():
                wants[kind] = len(mine.devices.get(kind, ())) + count
            if any(kind in quota and amount > quota[kind] + 1e-9 for kind, amount in wants.items()):
                return None
        reservation = Reservation(
            project=project,
            owner_kind=owner_kind,
            owner_id=owner_id,
            cpu=resources.cpu,
            memory=resources.memory,
            devices=picked,
        )
        session.add(reservation)  # written at the next query or the commit: a start waits for neither
        return reservation

    def reserve(
        self, project: str, owner_kind: str, owner_id: str, resources: Resources
    ) -> Reservation | None:
        """Check, then reserve in a transaction of its own; None when it does not fit now."""
        self.check(project, resources)
        with self.locked() as session:
            return self.try_reserve(session, project, owner_kind, owner_id, resources)

    def release(self, owner_kind: str, owner_id: str, session: Session | None = None) -> None:
        """Give back what a job or notebook holds (nothing held is fine)."""
        if session is None:
            with self.locked() as session:
                return self.release(owner_kind, owner_id, session)
        session.execute(
            delete(Reservation).where(Reservation.owner_kind == owner_kind, Reservation.owner_id == owner_id)
        )
