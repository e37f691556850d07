"""Request metrics of a deployment per model version, summed over the replicas that serve it.

Each replica counts its own requests (`kpl_helper.deploy` answers GET /metrics): the counts
are those since the replica started, whichever process (server, CLI, notebook) sent them.
"""

from __future__ import annotations

import json
import math

from . import address

METRICS_TIMEOUT_SECONDS = 2.0


def percentile(values: list[float], fraction: float) -> float | None:
    """Return the nearest-rank percentile of `values` (None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]


def read_replica(url: str) -> dict | None:
    """Return the counters of the replica at `url` (unix:PATH or http://HOST:PORT), or None when it does not answer them."""
    try:
        status, body = address.request(url, "GET", "/metrics", METRICS_TIMEOUT_SECONDS)
        return json.loads(body) if status == 200 else None
    except (OSError, ValueError):
        return None


def summarize(per_replica: list[tuple[str, dict]]) -> dict[str, dict]:
    """Return model version -> requests, errors, p50_ms and p99_ms from (version, counters) pairs."""
    totals: dict[str, dict] = {}
    latencies: dict[str, list[float]] = {}
    for version, counters in per_replica:
        total = totals.setdefault(version, {"requests": 0, "errors": 0})
        total["requests"] += int(counters.get("requests", 0))
        total["errors"] += int(counters.get("errors", 0))
        latencies.setdefault(version, []).extend(counters.get("latency_ms", []))
    for version, total in totals.items():
        total["p50_ms"] = percentile(latencies[version], 0.50)
        total["p99_ms"] = percentile(latencies[version], 0.99)
    return totals
