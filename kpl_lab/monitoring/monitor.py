"""The host's monitoring steps in the background round: sample, evaluate alerts, keep history, write the audit.

A host (the hub's service, a single-user server) makes one `Monitor` and adds its `steps()`
to its `Rounds`. Every round samples the machine (`live`, for the admin page); every
`sample_seconds` a `Snapshot` of the platform is taken, which the metrics, the alert rules and
the admin page's totals read; every `history_seconds` its rows go to the usage history. The
audit events the requests queued are written every round, and due notifications are tried
on the notifier's own thread.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from traitlets import Float, Unicode
from traitlets.config import LoggingConfigurable
from traitlets.utils.importstring import import_item

from . import history, machine
from .metrics import COLLECTOR, JOB_WAIT, GatewayTraffic
from .snapshot import Snapshot, take

PRUNE_SECONDS = 3600.0  # how often old alerts and audit events are dropped


class Monitor(LoggingConfigurable):
    """Sample the platform for its metrics, alerts, history and admin page."""

    sample_seconds = Float(
        15.0, help="Seconds between snapshots of the platform (metrics, alerts, totals)."
    ).tag(config=True)
    history_seconds = Float(60.0, help="Seconds between the rows kept in the usage history.").tag(config=True)
    history_days = Float(7.0, help="Days the usage history is kept.").tag(config=True)
    npu_reader = Unicode(
        "", help="Dotted name of a callable returning the NPUs' use as a list of dicts (empty: no NPUs)."
    ).tag(config=True)

    def __init__(self, platform: Any, imports: Any = None, **kwargs: Any) -> None:
        super().__init__(parent=platform, **kwargs)
        self.platform = platform
        self.imports = imports
        self.npu = import_item(self.npu_reader) if self.npu_reader else None
        self.nvml: Any = None  # tests hand a fake NVML here
        self.live: dict | None = None
        self.snapshot: Snapshot | None = None
        self.traffic = GatewayTraffic()
        self._sampled = self._kept = self._pruned = 0.0
        self._since: datetime | None = None
        self._fresh = False  # a snapshot the alerts have not seen yet
        COLLECTOR.monitors.add(self)

    def steps(self) -> list:
        """Return the round's steps, in order (each one's failure leaves the others to run)."""
        return [
            self.sample,
            self.evaluate,
            self.keep_history,
            self.platform.audit.flush,
            self.notify,
            self.prune,
        ]

    def paths(self) -> list[str]:
        """Return the folders whose disks count: the home and a local storage root."""
        found = [str(self.platform.home)]
        root = getattr(self.platform.storage, "root", None)
        if isinstance(root, Path):
            found.append(str(root))
        return found

    def sample(self, force: bool = False) -> Snapshot | None:
        """Sample the machine; take a snapshot of the platform when it is due (or `force`); return the new one."""
        self.live = machine.sample(nvml=self.nvml, npu_reader=self.npu, paths=self.paths())
        if not force and time.monotonic() - self._sampled < self.sample_seconds:
            return None
        self._sampled = time.monotonic()
        since, self._since = self._since, datetime.now(UTC)
        snapshot = take(self.platform, self.live, since=since, imports=self.imports)
        for project, wait in snapshot.started:
            JOB_WAIT.labels(project).observe(wait)
        self.traffic.update(self.platform)
        self.snapshot = snapshot
        self._fresh = True
        return snapshot

    def evaluate(self) -> list:
        """Move the alerts on with a new snapshot (once per snapshot)."""
        if self.snapshot is None or not self._fresh:
            return []
        self._fresh = False
        return self.platform.alerts.evaluate(self.snapshot)

    def keep_history(self) -> int:
        """Write the latest snapshot to the usage history when a row is due."""
        if self.snapshot is None or self.snapshot.time - self._kept < self.history_seconds:
            return 0
        self._kept = self.snapshot.time
        return history.add(self.platform, self.snapshot, self.history_days)

    def notify(self) -> bool:
        """Try the due notifications on the notifier's thread."""
        return self.platform.alerts.notifier.deliver_later()

    def prune(self) -> None:
        """Drop old resolved alerts and old audit events, once an hour."""
        if time.monotonic() - self._pruned < PRUNE_SECONDS and self._pruned:
            return
        self._pruned = time.monotonic()
        self.platform.alerts.prune()
        self.platform.audit.prune()

    def close(self) -> None:
        """Stop exposing this host's metrics."""
        COLLECTOR.monitors.discard(self)
