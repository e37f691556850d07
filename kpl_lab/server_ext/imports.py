"""Dataset imports on their own bounded thread pool: a flood of uploads never starves catalog queries.

At most `workers` imports run at once; the others wait in order, `queued`, and are listed by
`GET /kpl/api/imports` with the state they are in. An import leaves the list when it ends:
its upload request answers the new version or the error.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ..errors import Unavailable
from ..monitoring.metrics import IMPORT_WAIT, IMPORTS

QUEUED, IMPORTING = "queued", "importing"


@dataclass
class DatasetImport:
    """One upload waiting for, or being run by, an import worker."""

    project: str
    dataset: str
    format: str
    filename: str
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    state: str = QUEUED
    queued_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    started_at: datetime | None = None
    future: Future | None = None


class ImportQueue:
    """Run imports `workers` at a time; refuse new ones when `max_waiting` already wait."""

    def __init__(self, workers: int, max_waiting: int) -> None:
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="kpl-import")
        self._max_waiting = max_waiting
        self._lock = threading.Lock()
        self._imports: dict[str, DatasetImport] = {}  # in submission order

    def waiting(self) -> int:
        """Return how many imports wait for a worker."""
        with self._lock:
            return sum(1 for item in self._imports.values() if item.state == QUEUED)

    def check_room(self) -> None:
        """Refuse an upload before its body is stored when the queue is full."""
        if self.waiting() >= self._max_waiting:
            raise Unavailable(
                f"{self._max_waiting} dataset imports are already waiting; try again in a few minutes"
            )

    def submit(self, item: DatasetImport, function: Callable[..., Any], *args: Any) -> asyncio.Future:
        """Queue FUNCTION(*ARGS) as the import ITEM; return a future of the event loop."""
        self.check_room()

        def run() -> Any:
            with self._lock:
                item.state, item.started_at = IMPORTING, datetime.now(timezone.utc)
            IMPORT_WAIT.observe((item.started_at - item.queued_at).total_seconds())
            try:
                found = function(*args)
            except BaseException:
                IMPORTS.labels("failed").inc()
                raise
            IMPORTS.labels("ok").inc()
            return found

        with self._lock:
            self._imports[item.id] = item
        item.future = self._pool.submit(run)
        item.future.add_done_callback(lambda _: self._forget(item.id))
        return asyncio.wrap_future(item.future)

    def cancel(self, item: DatasetImport) -> bool:
        """Drop a still queued import (its client went away); False once it runs."""
        return item.future is not None and item.future.cancel()

    def _forget(self, import_id: str) -> None:
        with self._lock:
            self._imports.pop(import_id, None)

    def counts(self) -> dict[str, int]:
        """Return how many imports are queued and importing now."""
        with self._lock:
            states = [item.state for item in self._imports.values()]
        return {QUEUED: states.count(QUEUED), IMPORTING: states.count(IMPORTING)}

    def list(self, project: str) -> list[dict]:
        """Return the project's imports in flight, oldest first."""
        answer = []
        ahead = 0  # imports of every project wait in one line
        with self._lock:
            for item in self._imports.values():
                if item.project == project:
                    answer.append(
                        {
                            "id": item.id,
                            "dataset": item.dataset,
                            "format": item.format,
                            "filename": item.filename,
                            "state": item.state,
                            "queued_at": item.queued_at,
                            "started_at": item.started_at,
                            "ahead": ahead if item.state == QUEUED else 0,
                        }
                    )
                if item.state == QUEUED:
                    ahead += 1
        return answer

    def shutdown(self) -> None:
        """Drop queued imports and wait for the running ones."""
        self._pool.shutdown(wait=True, cancel_futures=True)
