"""The usage history: each machine's, project's and user's use, a row each a minute, kept a bounded time.

Every value is a percent of the machine, so one chart shows any scope: CPU and memory used
(the machine as psutil measures it; a project or user by its running jobs' samples), GPU and
NPU utilization (the machine's devices; a project's or user's: the GPUs it holds), and what
the ledger holds (CPU and memory of its jobs, notebooks and replicas). Rows older than the
host's `history_days` are dropped as new ones are written.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, insert, select

from ..api.monitoring import UsageHistory, UsagePoint
from ..catalog.serialize import utc
from ..catalog.usage import UsageSample
from .snapshot import Snapshot

SCOPES = ("machine", "project", "user")
POINTS = 300  # a chart's points at most: longer periods are averaged into this many
# the chart's lines: key in a row, legend
CHART = (
    ("cpu_percent", "CPU (%)"),
    ("memory_percent", "memory (%)"),
    ("gpu_percent", "GPU (%)"),
    ("npu_percent", "NPU (%)"),
    ("cpu_held_percent", "CPU held (%)"),
    ("memory_held_percent", "memory held (%)"),
)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def rows(snapshot: Snapshot) -> list[dict]:
    """Return the history's rows of one snapshot: the machine, each project and each user."""
    machine = snapshot.machine
    cores = max(1, machine["cpu_count"])
    memory = max(1, machine["memory_total_mb"])
    utilization = snapshot.gpu_utilization()
    when = datetime.fromtimestamp(snapshot.time, UTC)
    groups: dict[tuple[str, str], dict[str, Any]] = defaultdict(
        lambda: {
            "cpu": 0.0,
            "memory": 0.0,
            "cpu_held": 0.0,
            "memory_held": 0.0,
            "gpus": set(),
            "measured": False,
        }
    )
    for held in snapshot.reservations:
        for key in (("project", held["project"]), ("user", held["user"])):
            if key[1]:
                group = groups[key]
                group["cpu_held"] += held["cpu"]
                group["memory_held"] += held["memory"]
                group["gpus"].update(held["devices"].get("gpu", []))
    for job in snapshot.running:
        latest = job["latest"]
        for key in (("project", job["project"]), ("user", job["user"])):
            if key[1]:
                group = groups[key]
                group["cpu"] += (latest.get("cpu_percent") or 0.0) / 100
                group["memory"] += latest.get("memory_mb") or 0.0
                group["measured"] = True
    held_cpu = sum(h["cpu"] for h in snapshot.reservations)
    held_memory = sum(h["memory"] for h in snapshot.reservations)
    machine_use = {
        "cpu_percent": float(machine["cpu_percent"]),
        "memory_percent": 100.0 * machine["memory_used_mb"] / memory,
        "cpu_held_percent": 100.0 * held_cpu / cores,
        "memory_held_percent": 100.0 * held_memory / memory,
        "cpu_cores": machine["cpu_percent"] * cores / 100,
        "memory_mb": float(machine["memory_used_mb"]),
    }
    for kind in ("gpu", "npu"):
        mean = _mean(
            [u["utilization_percent"] for u in machine.get(f"{kind}s", []) if "utilization_percent" in u]
        )
        if mean is not None:
            machine_use[f"{kind}_percent"] = mean
    found = [{"time": when, "scope": "machine", "name": machine.get("machine", ""), "use": machine_use}]
    for (scope, name), group in sorted(groups.items()):
        use = {
            "cpu_held_percent": 100.0 * group["cpu_held"] / cores,
            "memory_held_percent": 100.0 * group["memory_held"] / memory,
            "gpus_held": float(len(group["gpus"])),
        }
        if group["measured"]:
            use.update(
                cpu_percent=100.0 * group["cpu"] / cores,
                memory_percent=100.0 * group["memory"] / memory,
                cpu_cores=group["cpu"],
                memory_mb=group["memory"],
            )
        gpu = _mean([utilization[i] for i in group["gpus"] if i in utilization])
        if gpu is not None:
            use["gpu_percent"] = gpu
        found.append({"time": when, "scope": scope, "name": name, "use": use})
    return found


def add(platform: Any, snapshot: Snapshot, keep_days: float) -> int:
    """Write one snapshot's rows and drop those older than `keep_days`; return the rows written."""
    found = rows(snapshot)
    cutoff = datetime.now(UTC) - timedelta(days=keep_days)
    with platform.session() as session:
        session.execute(insert(UsageSample), found)
        session.execute(delete(UsageSample).where(UsageSample.time < cutoff))
    return len(found)


def series(
    platform: Any, scope: str, name: str, period_seconds: int, now: datetime | None = None
) -> UsageHistory:
    """Return one scope's use over the last `period_seconds`, averaged into at most `POINTS` points."""
    now = now or datetime.now(UTC)
    since = now - timedelta(seconds=period_seconds)
    with platform.session() as session:
        names = {
            kind: sorted(
                session.scalars(
                    select(UsageSample.name)
                    .distinct()
                    .where(UsageSample.scope == kind, UsageSample.time >= since)
                )
            )
            for kind in SCOPES
        }
        if not name and names[scope]:
            name = names[scope][0]
        found = session.execute(
            select(UsageSample.time, UsageSample.use)
            .where(UsageSample.scope == scope, UsageSample.name == name, UsageSample.time >= since)
            .order_by(UsageSample.time)
        ).all()
    width = max(1.0, period_seconds / POINTS)
    buckets: dict[int, list[dict]] = defaultdict(list)
    for time, use in found:
        buckets[int(utc(time).timestamp() // width)].append(use)
    points = []
    for bucket, uses in sorted(buckets.items()):
        keys = {key for use in uses for key in use}
        averaged = {
            key: sum(use[key] for use in uses if key in use) / sum(key in use for use in uses) for key in keys
        }
        points.append(UsagePoint(time=datetime.fromtimestamp(bucket * width, UTC), use=averaged))
    return UsageHistory(scope=scope, name=name, period_seconds=period_seconds, points=points, names=names)
