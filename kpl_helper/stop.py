"""Let the job ask the platform to stop it."""

from __future__ import annotations

from kpl_helper import events
from kpl_helper.base import logger


class StopTask:
    """The original's stop request, kept for code that used `stop.StopTask().stop()`."""

    def stop(self) -> None:
        """Ask the platform to stop this job (see kill)."""
        kill()


def kill() -> None:
    """Ask the platform to stop this job, after sending every buffered event."""
    if events.get_writer() is not None:
        logger.info("[kpl-helper]: asking the platform to stop this job")
        events.emit("stop", final=True)
