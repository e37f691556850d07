"""How far the job is (0.0 to 1.0), for the estimated time left."""

from __future__ import annotations

from kpl_helper import distributed, events
from kpl_helper.base import get_config, logger
from kpl_helper.metric import number


class Metric:
    """The original's progress sender, kept for code that used `progress.Metric().send_progress(p)`."""

    def send_progress(self, progress) -> None:
        """Send the job's progress (see send_progress)."""
        send_progress(progress)


def send_progress(progress) -> None:
    """Send the job's progress, clamped to [0.0, 1.0] with a warning; nothing outside the platform.

    In a job of several workers only rank 0's progress is sent.
    """
    if not get_config().inner or distributed.get_rank():
        return
    value = number(progress, "progress")
    if not (0.0 <= value <= 1.0):
        logger.warning("Progress should be in range [0.0, 1.0]. but get `{}`".format(progress))  # noqa: UP032 original text
        value = min(max(value, 0.0), 1.0)
    events.emit("progress", value=value)
