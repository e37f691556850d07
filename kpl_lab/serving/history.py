"""Request metrics over time: what the gateway saw per deployment and model version, in 10 s buckets.

The gateway counts each request in memory (`RequestHistory.record`: one append to a queue,
binned by `buckets` off the request path, no database); the platform's background round writes the
buckets to the catalog (`flush`, table `deployment_metrics`), adding to a bucket another
process (the CLI, another server) wrote. A bucket keeps requests, errors (any answer but
2xx, and 503s while no replica was ready) and a latency histogram with bins 10 % wide, so
p50/p99 of any span are read from merged histograms (within 5 % of the exact value).
Buckets older than `RETENTION_DAYS` are dropped as new ones are written.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, select

from ..catalog.deployments import Deployment, DeploymentMetrics
from ..catalog.models import Project
from ..catalog.serialize import utc

BUCKET_SECONDS = 10
RETENTION_DAYS = 7
SMALLEST_MS = 0.05  # the first bin's lower edge; faster answers land in bin 0
GROWTH = 1.1  # each bin is 10 % wider than the one before


def latency_bin(milliseconds: float) -> int:
    """Return the histogram bin of a latency."""
    if milliseconds <= SMALLEST_MS:
        return 0
    return int(math.log(milliseconds / SMALLEST_MS, GROWTH)) + 1


def bin_value(index: int) -> float:
    """Return the latency a bin stands for: the geometric middle of its edges."""
    if index == 0:
        return SMALLEST_MS
    return SMALLEST_MS * GROWTH ** (index - 0.5)


def percentile(histogram: Mapping[int, int], fraction: float) -> float | None:
    """Return the nearest-rank percentile of a histogram (None when empty), rounded to 0.01 ms."""
    total = sum(histogram.values())
    if not total:
        return None
    rank = max(1, math.ceil(fraction * total))
    seen = 0
    for index in sorted(histogram):
        seen += histogram[index]
        if seen >= rank:
            return round(bin_value(index), 2)
    return None  # not reached: the ranks add up to the total


class Bucket:
    """Requests, errors and latency bins of one version in one interval."""

    __slots__ = ("errors", "latency", "requests")

    def __init__(self) -> None:
        self.requests = 0
        self.errors = 0
        self.latency: Counter[int] = Counter()


class RequestHistory:
    """Count requests in memory; write them to the catalog off the request path."""

    def __init__(self) -> None:
        self._seen: deque[tuple[str, str, str, float | None, bool, float]] = deque()

    def record(
        self, project: str, name: str, version: str, milliseconds: float | None, error: bool, now: float
    ) -> None:
        """Count one request at `now` (epoch seconds); `milliseconds` None: no replica answered it."""
        self._seen.append((project, name, version, milliseconds, error, now))  # binned by `flush`

    def buckets(self) -> dict[tuple[str, str, str, int], Bucket]:
        """Take the requests counted so far, binned by project, deployment, version and interval."""
        pending: dict[tuple[str, str, str, int], Bucket] = {}
        seen = self._seen
        for _ in range(len(seen)):  # what is recorded meanwhile waits for the next flush
            project, name, version, milliseconds, error, now = seen.popleft()
            key = (project, name, version, int(now // BUCKET_SECONDS) * BUCKET_SECONDS)
            bucket = pending.get(key)
            if bucket is None:
                bucket = pending[key] = Bucket()
            bucket.requests += 1
            bucket.errors += error
            if milliseconds is not None:
                bucket.latency[latency_bin(milliseconds)] += 1
        return pending

    def flush(self, platform) -> int:
        """Add the buckets counted so far to the catalog; return how many were written."""
        pending = self.buckets()
        if not pending:
            return 0
        cutoff = datetime.now(UTC) - timedelta(days=RETENTION_DAYS)
        with platform.session(immediate=True) as session:
            ids: dict[tuple[str, str], int | None] = {}
            for (project, name, version, start), bucket in pending.items():
                if (project, name) not in ids:
                    ids[(project, name)] = session.scalar(
                        select(Deployment.id)
                        .join(Project)
                        .where(Project.name == project, Deployment.name == name)
                    )
                deployment_id = ids[(project, name)]
                if deployment_id is None:  # deleted meanwhile: its metrics went with it
                    continue
                when = datetime.fromtimestamp(start, UTC)
                row = session.scalar(
                    select(DeploymentMetrics).where(
                        DeploymentMetrics.deployment_id == deployment_id,
                        DeploymentMetrics.model_version == version,
                        DeploymentMetrics.start == when,
                    )
                )
                if row is None:
                    row = DeploymentMetrics(
                        deployment_id=deployment_id,
                        model_version=version,
                        start=when,
                        requests=0,
                        errors=0,
                        latency={},
                    )
                    session.add(row)
                merged = Counter({int(k): v for k, v in (row.latency or {}).items()}) + bucket.latency
                row.requests += bucket.requests
                row.errors += bucket.errors
                row.latency = {str(k): v for k, v in sorted(merged.items())}
            live = [i for i in ids.values() if i is not None]
            session.execute(
                delete(DeploymentMetrics)
                .where(DeploymentMetrics.deployment_id.in_(live), DeploymentMetrics.start < cutoff)
                .execution_options(synchronize_session=False)
            )
        return len(pending)


def series(platform, deployment_id: int, since: datetime) -> tuple[dict[str, list[dict]], dict[str, dict]]:
    """Return version -> points (time, requests, errors, p50_ms, p99_ms) since `since`, and totals per version."""
    with platform.session() as session:
        rows = list(
            session.scalars(
                select(DeploymentMetrics)
                .where(DeploymentMetrics.deployment_id == deployment_id, DeploymentMetrics.start >= since)
                .order_by(DeploymentMetrics.start)
            )
        )
    points: dict[str, list[dict]] = {}
    for row in rows:
        histogram = {int(k): v for k, v in row.latency.items()}
        points.setdefault(row.model_version, []).append(
            {
                "time": utc(row.start),
                "requests": row.requests,
                "errors": row.errors,
                "p50_ms": percentile(histogram, 0.50),
                "p99_ms": percentile(histogram, 0.99),
            }
        )
    return points, _totals(rows)


def totals(platform, deployment_id: int) -> dict[str, dict]:
    """Return version -> requests, errors, p50_ms, p99_ms over the whole kept history."""
    with platform.session() as session:
        rows = list(
            session.scalars(select(DeploymentMetrics).where(DeploymentMetrics.deployment_id == deployment_id))
        )
    return _totals(rows)


def _totals(rows: list[DeploymentMetrics]) -> dict[str, dict]:
    found: dict[str, dict] = {}
    histograms: dict[str, Counter[int]] = {}
    for row in rows:
        total = found.setdefault(row.model_version, {"requests": 0, "errors": 0})
        total["requests"] += row.requests
        total["errors"] += row.errors
        histograms.setdefault(row.model_version, Counter()).update(
            {int(k): v for k, v in row.latency.items()}
        )
    for version, total in found.items():
        total["p50_ms"] = percentile(histograms[version], 0.50)
        total["p99_ms"] = percentile(histograms[version], 0.99)
    return found
