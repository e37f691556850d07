"""Who calls an operation, in which project, on which platform: built once per request by its transport."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

API_PREFIX = "/kpl/api"


@dataclass
class Caller:
    """The context every operation takes first.

    `user` is the hub name of the caller, whose account runs the jobs they submit ("" where
    nobody logged in: a command on its own home). `api_base` starts the URLs an answer holds
    (the media of dataset records). `imports` is the host's queue of dataset imports (None:
    an import runs at once, in the request). `start_run(project, run_id)` executes a recorded
    pipeline run in the background: a thread of the server, or a process of its own beside a
    command. `gateway` forwards predictions to deployments' replicas.
    """

    platform: Any
    project: str
    user: str = ""
    is_admin: bool = False
    api_base: str = API_PREFIX
    imports: Any = None
    start_run: Callable[[str, str], None] | None = None
    gateway: Any = None
    audit_target: str = ""
    project_members: Callable[[str], Awaitable[list[str] | None]] | None = None
