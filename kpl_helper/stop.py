"""Let the job ask the platform to stop it."""

from __future__ import annotations

from kpl_helper import events
from kpl_helper.base import logger


def kill() -> None:
    """Ask the platform to stop this job, after sending every buffered event."""
    if events.get_writer() is not None:
        logger.info("[kpl-helper]: asking the platform to stop this job")
        events.emit("stop", final=True)
