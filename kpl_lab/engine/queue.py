"""The queue: why each queued job waits, what holds the resources it needs, and its place.

It follows the scheduler's own order and rules (`Scheduler.reserve_queued`): by priority
then age across the machine, first come first served within a project, a job starting
only when the machine and its project's quota both hold what it asks. What a job lacks
is worked out against what is held now plus what the jobs ahead of it would take.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session, joinedload

from ..catalog.jobs import Job, Reservation
from .launch import Resources
from .ledger import Ledger, Usage, _amount

OTHER_PROJECT = "another project"


@dataclass
class Holder:
    """A job or notebook holding resources a queued job needs (ids only within the job's project)."""

    kind: str  # job | notebook
    id: str | None
    user: str | None
    project: str | None
    cpu: float
    memory: int
    devices: dict[str, int]

    def words(self, user: str) -> str:
        """Name the holder as the queued job's submitter would: your notebook, job 3fa2, ..."""
        if self.project is None:
            return f"a {self.kind} of {OTHER_PROJECT}"
        if self.kind == "notebook":
            return "your notebook" if self.user == user and user else f"the notebook of {self.user}"
        return f"job {self.id}"

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "id": self.id,
            "user": self.user,
            "project": self.project,
            "cpu": self.cpu,
            "memory": self.memory,
            "devices": self.devices,
        }


@dataclass
class QueueReason:
    """Why one queued job waits."""

    position: int  # 1: the next job the machine starts
    queued: int  # queued jobs on the machine
    limit: str  # machine | quota | behind | none
    waits_for: list[str] = field(default_factory=list)  # cpu, memory, gpu, npu
    behind: str | None = None  # the earlier job of its project it waits behind
    held_by: list[Holder] = field(default_factory=list)
    message: str = ""

    def to_json(self) -> dict:
        return {
            "position": self.position,
            "queued": self.queued,
            "limit": self.limit,
            "waits_for": self.waits_for,
            "behind": self.behind,
            "held_by": [holder.to_json() for holder in self.held_by],
            "message": self.message,
        }


def _ordinal(number: int) -> str:
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"


def _wants(resources: Resources) -> dict[str, float]:
    total = resources.total()
    return {"cpu": total.cpu, "memory": total.memory, **{k: v for k, v in total.devices.items() if v}}


def _held(usage: Usage) -> dict[str, float]:
    return {"cpu": usage.cpu, "memory": usage.memory, **{k: len(v) for k, v in usage.devices.items()}}


def _holds(holder: Holder, kind: str) -> bool:
    if kind in ("cpu", "memory"):
        return getattr(holder, kind) > 0
    return holder.devices.get(kind, 0) > 0


class Queue:
    """Explain the queue of one machine's ledger."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def reasons(self, session: Session, project: str | None = None) -> dict[str, QueueReason]:
        """Return job id -> why it waits, for every queued job (or those of `project`)."""
        queued = session.scalars(
            select(Job)
            .options(joinedload(Job.project))
            .where(Job.state == "queued")
            .order_by(Job.priority.desc(), Job.created, Job.id)
        ).all()
        if not queued:
            return {}
        reservations = list(session.scalars(select(Reservation).order_by(Reservation.created)))
        machine = Usage()
        by_project: dict[str, Usage] = {}
        for row in reservations:
            machine.add(row)
            by_project.setdefault(row.project, Usage()).add(row)
        found = self.ledger.machine(session)
        capacity = {"cpu": found.cpu, "memory": found.memory}
        capacity.update({kind: len(devices) for kind, devices in found.inventory.items()})
        ahead: dict[str, Job] = {}  # project -> its first waiting job
        reasons = {}
        for position, job in enumerate(queued, start=1):
            name = job.project.name
            wants = _wants(Resources(**job.limits))
            if name in ahead:
                first = ahead[name]
                reason = QueueReason(position, len(queued), "behind", behind=first.id)
                reason.message = (
                    f"waits behind job {first.id} of project {name!r} (first come, first served); "
                    f"{_ordinal(position)} of {len(queued)} in the queue"
                )
            else:
                quota = self.ledger.quota(session, name)
                reason = self._explain(job, wants, capacity, quota, machine, by_project, reservations)
                reason.position, reason.queued = position, len(queued)
                reason.message += f"; {_ordinal(position)} of {len(queued)} in the queue"
                if reason.limit == "none":  # it fits: the scheduler takes it on its next pass
                    _take(machine, by_project.setdefault(name, Usage()), wants)
                else:
                    ahead[name] = job
            if project is None or name == project:
                reasons[job.id] = reason
        return reasons

    def _explain(
        self,
        job: Job,
        wants: dict[str, float],
        capacity: dict[str, float],
        quota: dict[str, float],
        machine: Usage,
        by_project: dict[str, Usage],
        reservations: list[Reservation],
    ) -> QueueReason:
        name = job.project.name
        held = _held(machine)
        short = [k for k, v in wants.items() if v and held.get(k, 0) + v > capacity.get(k, 0) + 1e-9]
        limit = "machine"
        free = {
            k: f"{max(0.0, capacity.get(k, 0) - held.get(k, 0)):g} free of {capacity.get(k, 0):g}"
            for k in short
        }
        if not short:
            used = _held(by_project.get(name, Usage()))
            short = [k for k, v in wants.items() if v and k in quota and used.get(k, 0) + v > quota[k] + 1e-9]
            limit = "quota"
            free = {k: f"project {name!r} allows {quota[k]:g}, {used.get(k, 0):g} in use" for k in short}
            reservations = [row for row in reservations if row.project == name]
        if not short:
            return QueueReason(0, 0, "none", message="fits now: starts at the scheduler's next pass")
        holders = [
            holder
            for holder in (_holder(row, name) for row in reservations)
            if any(_holds(holder, kind) for kind in short)
        ]
        lacks = " and ".join(f"{_amount(k, wants[k])} ({free[k]})" for k in short)
        held_words = _list([holder.words(job.user) for holder in holders]) or "the jobs ahead of it"
        return QueueReason(
            0, 0, limit, waits_for=short, held_by=holders, message=f"waits for {lacks}; held by {held_words}"
        )


def _take(machine: Usage, project: Usage, wants: dict[str, float]) -> None:
    """Count a job that fits as started, for the jobs behind it."""
    for usage in (machine, project):
        usage.cpu += wants.get("cpu", 0)
        usage.memory += int(wants.get("memory", 0))
        for kind, count in wants.items():
            if kind not in ("cpu", "memory"):
                taken = usage.devices.setdefault(kind, set())
                taken.update(range(-len(taken) - int(count), -len(taken)))  # stand-ins, never real indexes


def _holder(row: Reservation, project: str) -> Holder:
    mine = row.project == project  # other projects' holders stay anonymous
    notebook_user = row.owner_id.partition("/")[0] if row.owner_kind == "notebook" else None
    return Holder(
        kind=row.owner_kind,
        id=row.owner_id if mine else None,
        user=notebook_user if mine else None,
        project=row.project if mine else None,
        cpu=row.cpu,
        memory=row.memory,
        devices={kind: len(indexes) for kind, indexes in (row.devices or {}).items()},
    )


def _list(words: list[str]) -> str:
    counted: dict[str, int] = {}
    for word in words:
        counted[word] = counted.get(word, 0) + 1
    named = [word if count == 1 else f"{count} × {word}" for word, count in counted.items()]
    if len(named) <= 1:
        return "".join(named)
    return ", ".join(named[:-1]) + " and " + named[-1]
