"""The hub's log without the platform service's polling: its routine reads of users and groups."""

from __future__ import annotations

import logging
import re

# "200 GET /hub/api/groups (kpl@127.0.0.1) 3.02ms", as jupyterhub.log.log_request writes it
POLLING = r"^2\d\d GET /hub/api/(groups|users)\S* \({service}@"


class QuietPolling(logging.Filter):
    """Let a service's successful reads of the hub API through at debug level only."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.pattern = re.compile(POLLING.format(service=re.escape(service)))

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO or not self.pattern.match(record.getMessage()):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def quiet_service_polling(service: str) -> None:
    """Log the service's every-few-seconds reads of users and groups at debug level (the hub's config calls it)."""
    logging.getLogger("tornado.access").addFilter(QuietPolling(service))
