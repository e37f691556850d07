"""The rules the platform decides with: projects' quotas, the machine's capacity, job defaults, profiles.

They live in the catalog database and are read when a decision is made (a reservation, a
spawn, a job's default resources), by every process alike: the hub's service, a single-user
server, the spawner, a job's supervisor, the CLI. Nobody decides with a copy of its own.

A rule is written two ways:
- `set`: an edit (the admin page, the REST API, `kpl-lab`), in effect at the next decision;
- `load`: from a source of the administrator's (traitlets configuration at a host's start,
  the hub's group properties): written only when that source's value changed since it was
  last loaded (`loaded` holds its digest), so an edit made since stands until the source
  itself changes.
"""

from __future__ import annotations

import hashlib
import json
import math
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import JSON, DateTime, String, UniqueConstraint, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from ..errors import BadRequest
from .db import Base
from .models import utcnow

if TYPE_CHECKING:
    from ..platform import Platform

QUOTA, CAPACITY, JOB_DEFAULTS, PROFILES = "quota", "capacity", "job_defaults", "profiles"
MACHINE = ""  # the name of the platform-wide rules (capacity, job defaults, profiles)
QUOTA_KEYS = ("cpu", "memory", "gpu", "npu", "notebooks")


def check_quota(quota: Any, where: str = "quota") -> dict[str, float]:
    """Return a project's quota checked (a missing or null key is not limited); BadRequest naming the key."""
    if quota is None:
        return {}
    if not isinstance(quota, dict):
        raise BadRequest(
            f'{where}: expected an object such as {{"cpu": 8, "gpu": 1}}, got {type(quota).__name__}',
            field=where,
        )
    checked = {}
    for key, value in quota.items():
        if key not in QUOTA_KEYS:
            raise BadRequest(f"{where}.{key}: unknown quota; known: {', '.join(QUOTA_KEYS)}", field=key)
        if value is None:
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value < 0
        ):
            raise BadRequest(f"{where}.{key}: expected a number >= 0, got {value!r}", field=key)
        checked[key] = value
    return checked


class Rule(Base):
    """One rule: a kind (quota, capacity, ...), what it is about (a project, or the platform) and its value."""

    __tablename__ = "rules"
    __table_args__ = (UniqueConstraint("kind", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(String(40))
    name: Mapped[str] = mapped_column(String(200))
    value: Mapped[Any] = mapped_column(JSON, nullable=True)
    loaded: Mapped[str] = mapped_column(String(64), default="")  # digest of the source value last loaded
    updated: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


def digest(value: Any) -> str:
    """Return the digest of a rule's value (key order does not count)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


class Rules:
    """Read and write the platform's rules."""

    def __init__(self, platform: Platform) -> None:
        self.platform = platform

    # reading, in the caller's transaction (a reservation reads them under the ledger's lock)

    @staticmethod
    def get(session: Session, kind: str, name: str = MACHINE, default: Any = None) -> Any:
        """Return a rule's value, or `default` when there is none."""
        value = session.scalar(select(Rule.value).where(Rule.kind == kind, Rule.name == name))
        return default if value is None else value

    @staticmethod
    def all(session: Session, kind: str) -> dict[str, Any]:
        """Return name -> value of every rule of a kind."""
        rows = session.execute(select(Rule.name, Rule.value).where(Rule.kind == kind)).all()
        return {name: value for name, value in rows if value is not None}

    def read(self, kind: str, name: str = MACHINE, default: Any = None) -> Any:
        """Return a rule's value in a transaction of its own."""
        with self.platform.session() as session:
            return self.get(session, kind, name, default)

    def read_all(self, kind: str) -> dict[str, Any]:
        """Return every rule of a kind in a transaction of its own."""
        with self.platform.session() as session:
            return self.all(session, kind)

    # writing

    def set(self, kind: str, name: str, value: Any, sourced: bool = False) -> None:
        """Write a rule now (None removes it): the next decision of any process uses it.

        `sourced`: the same value was written into the rule's source too (the admin page writes
        a group's property), so the next load of that source finds nothing new to write.
        """
        with self.platform.session(immediate=True) as session:
            row = session.scalar(select(Rule).where(Rule.kind == kind, Rule.name == name))
            if row is None:
                row = Rule(kind=kind, name=name, loaded="")
                session.add(row)
            row.value, row.updated = value, utcnow()
            if sourced:
                row.loaded = digest(value)

    def load(self, kind: str, name: str, value: Any, seed: bool = False) -> bool:
        """Write a rule from an administrator's source when that source's value changed; say whether it did.

        A rule edited since the source was last loaded keeps its edit until the source changes.
        `seed`: the source only seeds the rule (a configuration read at a first use, which may
        come long after an edit): a rule edited before it was ever loaded keeps its edit too.
        """
        loaded = digest(value)
        with self.platform.session() as session:
            found = session.execute(
                select(Rule.loaded).where(Rule.kind == kind, Rule.name == name)
            ).scalar_one_or_none()
        if found == loaded:
            return False
        with self.platform.session(immediate=True) as session:
            row = session.scalar(select(Rule).where(Rule.kind == kind, Rule.name == name))
            if row is None:
                row = Rule(kind=kind, name=name)
                session.add(row)
            elif row.loaded == loaded:  # loaded meanwhile by another process
                return False
            elif seed and not row.loaded:  # edited before any seed: the edit stands
                row.loaded = loaded
                return False
            row.value, row.loaded, row.updated = value, loaded, utcnow()
        return True
