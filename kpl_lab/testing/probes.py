"""Functions the tests call in sandboxed workers: who runs them, what they keep, how they fail."""

from __future__ import annotations

import os
import time

from ..errors import BadRequest
from ..sandbox import worker


def whoami() -> dict:
    """Return the worker's uid, groups and environment."""
    return {"uid": os.getuid(), "groups": sorted(os.getgroups()), "env": dict(os.environ), "pid": os.getpid()}


def echo(value, log=None):
    """Return `value`; log each of its items first when it is a list."""
    if log is not None and isinstance(value, list):
        for item in value:
            log(f"item {item}")
    return value


def blob(size: int) -> bytes:
    """Return `size` bytes."""
    return b"x" * size


def refuse(message: str, field: str) -> None:
    """Raise the BadRequest a parser raises on bad input."""
    raise BadRequest(message, field=field)


def crash() -> None:
    """Raise an error the platform does not know."""
    raise ZeroDivisionError("a bug in the worker")


def sleep(seconds: float, stop=None) -> str:
    """Sleep (a stop kills the worker: `stop` is never set here)."""
    time.sleep(seconds)
    return "slept"


def allocate(megabytes: int) -> int:
    """Hold `megabytes` of memory, touched, and return how many."""
    held = bytearray(megabytes << 20)
    for i in range(0, len(held), 4096):
        held[i] = 1
    return megabytes


def keep(value) -> None:
    """Keep `value` until the worker is reset."""
    kept = worker.session()
    kept.callback(_kept.clear)
    _kept.append(value)


def kept() -> list:
    """Return what `keep` kept since the last reset."""
    return list(_kept)


_kept: list = []


def sql_checks_open() -> bool:
    """Say whether this worker still holds a validation's SQL engine."""
    from ..pipelines import sql

    return sql._checks.get() is not None
