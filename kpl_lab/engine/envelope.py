"""A fixed-size min/max envelope of a metric series, kept up to date as points arrive.

The series is cut into at most BUCKETS buckets of `width` consecutive points; each
bucket keeps its lowest and highest point. When the series outgrows the buckets,
neighbours merge and the width doubles. A downsampled curve of any size up to
BUCKETS points is then read from the envelope without touching the points (a larger
request gets the envelope's full detail: between BUCKETS/2 and BUCKETS buckets).
"""

from __future__ import annotations

BUCKETS = 1024


def new() -> dict:
    """Return an empty envelope: width in points, count, buckets of [x_low, low, x_high, high]."""
    return {"width": 1, "count": 0, "buckets": []}


def add(envelope: dict, step: int, x: float, value: float) -> None:
    """Add the point with ordinal `step` (points arrive in step order)."""
    buckets = envelope["buckets"]
    while step // envelope["width"] >= BUCKETS:
        merged = []
        for i in range(0, len(buckets), 2):
            pair = buckets[i : i + 2]
            low = min(pair, key=lambda b: b[1])
            high = max(pair, key=lambda b: b[3])
            merged.append([low[0], low[1], high[2], high[3]])
        envelope["buckets"] = buckets = merged
        envelope["width"] *= 2
    index = step // envelope["width"]
    if index >= len(buckets):
        buckets.append([x, value, x, value])
    else:
        bucket = buckets[index]
        if value < bucket[1]:
            bucket[0], bucket[1] = x, value
        if value > bucket[3]:
            bucket[2], bucket[3] = x, value
    envelope["count"] = max(envelope["count"], step + 1)


def points(envelope: dict, max_points: int) -> list[tuple[float, float]]:
    """Return at most `max_points` points: the lowest and highest of each bucket, in x order."""
    buckets = envelope["buckets"]
    wanted = max(1, max_points // 2)
    if len(buckets) <= wanted:
        groups = [[bucket] for bucket in buckets]
    else:
        groups = [
            buckets[j * len(buckets) // wanted : (j + 1) * len(buckets) // wanted] for j in range(wanted)
        ]
    result: list[tuple[float, float]] = []
    for group in groups:
        low = min(group, key=lambda b: b[1])
        high = max(group, key=lambda b: b[3])
        pair = sorted({(low[0], low[1]), (high[2], high[3])})
        result.extend(pair)
    return result
