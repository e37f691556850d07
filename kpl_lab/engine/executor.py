"""The executor lifecycle shared by the local and the Kubernetes executors."""

from __future__ import annotations

import asyncio
import os
import threading
from dataclasses import dataclass, field

from traitlets.config import LoggingConfigurable

from .launch import JobLaunch


@dataclass
class ExecutionState:
    """What an executor reports about one job it started."""

    running: bool
    exit_code: int | None = None
    reason: str | None = None  # e.g. "exceeded its memory limit of 512 MB", "lost: process gone"
    handle: dict = field(default_factory=dict)  # executor-specific, JSON-serialisable, stored on the job


class Executor(LoggingConfigurable):
    """Run jobs somewhere: before_start, execute, then poll/stop; on_failure or on_complete.

    Handles are plain dicts so the scheduler can store them in the database and
    re-attach after a restart (`attach`).
    """

    uses_images = False  # jobs run in their algorithm's `image.from_image` (a cluster), not on this machine

    async def before_start(self, launch: JobLaunch) -> None:
        """Prepare what the job needs (run folder, environment) before it starts."""

    async def execute(self, launch: JobLaunch) -> dict:
        """Start the job and return its handle."""
        raise NotImplementedError

    async def start(self, launch: JobLaunch) -> dict:
        """Prepare and start the job, return its handle: `before_start`, then `execute` (or both at once)."""
        await self.before_start(launch)
        return await self.execute(launch)

    async def poll(self, launch: JobLaunch, handle: dict) -> ExecutionState:
        """Return the job's current state."""
        raise NotImplementedError

    async def stop(self, launch: JobLaunch, handle: dict, grace_seconds: float = 10.0) -> None:
        """Stop the job: SIGTERM (or delete), then force after the grace period."""
        raise NotImplementedError

    async def attach(self, launch: JobLaunch, handle: dict) -> ExecutionState:
        """Re-attach to a job started before a restart, or say it is lost."""
        return await self.poll(launch, handle)

    async def on_failure(self, launch: JobLaunch, state: ExecutionState) -> None:
        """Clean up after a job that failed or was stopped."""

    async def on_complete(self, launch: JobLaunch, state: ExecutionState) -> None:
        """Clean up after a job that succeeded."""


class _ThreadLoop:
    """The event loop one thread runs executor coroutines on, closed when the thread's locals go."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def __del__(self) -> None:
        self.loop.close()


_threads = threading.local()


def _forget_loops() -> None:
    """Give a forked child loops of its own (the inherited ones share the parent's epoll)."""
    global _threads
    _threads = threading.local()


os.register_at_fork(after_in_child=_forget_loops)


def run_sync(coroutine):
    """Run an executor coroutine from synchronous code, inside or outside an event loop.

    Outside one, each thread keeps its loop for its next calls: a new loop per call (as
    `asyncio.run` makes) costs more CPU than the local executor's whole launch, and every
    job start would pay it.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        if getattr(_threads, "runner", None) is None:
            _threads.runner = _ThreadLoop()
        return _threads.runner.loop.run_until_complete(coroutine)
    result: dict = {}

    def target() -> None:
        try:
            result["value"] = asyncio.run(coroutine)
        except BaseException as error:
            result["error"] = error

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result.get("value")
