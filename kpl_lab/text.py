"""Text for terminals: tables, fields, sizes, times, durations, progress bars, sparklines, job comparisons.

Imports the standard library only: the CLI, the magics and the widgets share it, and
loading the magics must not import the database layer.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .api.experiments import Comparison

SPARKS = "▁▂▃▄▅▆▇█"


def human_size(size: int | None) -> str:
    """Return a byte count as a short human-readable string."""
    if size is None:
        return "-"
    value = float(size)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1024 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def human_time(moment: datetime | str | None) -> str:
    """Return a stored (UTC) time, or its ISO text as the REST API gives it, in local time, to the minute."""
    if moment is None:
        return "-"
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment.replace("Z", "+00:00"))
    if moment.tzinfo is None:  # SQLite returns naive UTC
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone().strftime("%Y-%m-%d %H:%M")


def display_width(text: str) -> int:
    """Return how many terminal columns `text` takes (CJK characters take two)."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def render_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Return rows as an aligned plain-text table."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(display_width(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c + " " * (w - display_width(c)) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def render_fields(pairs: Sequence[tuple[str, object]]) -> str:
    """Return `key: value` lines, keys aligned."""
    width = max(len(k) for k, _ in pairs)
    out = []
    for key, value in pairs:
        if isinstance(value, (dict, list)):
            value = json.dumps(value, ensure_ascii=False, sort_keys=True) if value else "-"
        out.append(f"{key + ':':<{width + 1}} {'-' if value in (None, '') else value}")
    return "\n".join(out)


def emit_json(data: object) -> None:
    """Print data as JSON for scripts."""
    print(json.dumps(data, ensure_ascii=False, indent=2, default=str))


def short(text: str, width: int = 40) -> str:
    """Return text on one line, cut to `width` characters."""
    text = " ".join((text or "").split())
    return text if len(text) <= width else text[: width - 1] + "…"


def human_duration(seconds: float | None) -> str:
    """Return seconds as `1h02m`, `3m20s` or `12s`."""
    if seconds is None:
        return "-"
    seconds = int(round(max(0.0, seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def progress_bar(fraction: float, width: int = 24) -> str:
    """Return `[#######.........]  42%`."""
    fraction = min(1.0, max(0.0, fraction or 0.0))
    done = int(round(fraction * width))
    return f"[{'#' * done}{'.' * (width - done)}] {fraction * 100:3.0f}%"


def sparkline(values: Sequence[float], width: int = 30) -> str:
    """Return a one-line chart of `values` (resampled to at most `width` characters)."""
    if not values:
        return ""
    if len(values) > width:
        step = len(values) / width
        values = [values[min(len(values) - 1, int(i * step))] for i in range(width)] + [values[-1]]
        values = values[:width]
    low, high = min(values), max(values)
    if high == low:
        return SPARKS[len(SPARKS) // 2] * len(values)
    scale = (len(SPARKS) - 1) / (high - low)
    return "".join(SPARKS[int(round((v - low) * scale))] for v in values)


def format_number(value: float) -> str:
    """Return a metric value in a short form."""
    return f"{value:.4g}"


def comparison_rows(comparison: Comparison) -> tuple[list[str], list[tuple[str, list[str], bool]]]:
    """Return the column headers (one per job) and rows (label, cells, whether the cells differ)."""

    def cell(value: Any) -> str:
        if value is None:
            return "-"
        return f"{value:.4g}" if isinstance(value, float) else str(value)

    jobs = comparison.jobs
    rows = [
        ("state", [job.state.value for job in jobs], len({job.state for job in jobs}) > 1),
        ("algorithm", [f"{job.algorithm} {job.function}" for job in jobs], comparison.differing_algorithms),
    ]
    inputs = sorted({key for job in jobs for key in job.inputs})
    rows += [
        (f"input {key}", [job.inputs.get(key, "-") for job in jobs], key in comparison.differing_inputs)
        for key in inputs
    ]
    parameters = sorted({key for job in jobs for key in job.parameters})
    rows += [
        (key, [cell(job.parameters.get(key)) for job in jobs], key in comparison.differing_parameters)
        for key in parameters
    ]
    results = sorted({key for job in jobs for key in job.results})
    rows += [
        (f"result {key}", [cell(job.results.get(key)) for job in jobs], key in comparison.differing_results)
        for key in results
    ]
    for name in comparison.common_metrics:
        found = [next(m for m in job.metrics if f"{m.figure}/{m.series}" == name) for job in jobs]
        for what in ("final", "best"):
            values = [getattr(metric, what) for metric in found]
            rows.append((f"{name} {what}", [cell(v) for v in values], len(set(values)) > 1))
    durations = [job.duration_seconds for job in jobs]
    rows.append(("duration s", [cell(d) for d in durations], len(set(durations)) > 1))
    peaks = [job.peak_memory_mb for job in jobs]
    rows.append(("peak memory MB", [cell(p) for p in peaks], len(set(peaks)) > 1))
    rows.append(
        (
            "cpu",
            [cell(job.limits.get("cpu")) for job in jobs],
            len({job.limits.get("cpu") for job in jobs}) > 1,
        )
    )
    headers = [job.id + (f" ({job.experiment} #{job.trial})" if job.experiment else "") for job in jobs]
    return headers, rows
