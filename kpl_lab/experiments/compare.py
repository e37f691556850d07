"""Compare jobs: parameters (which differ), final and best metrics, inputs, versions, time and memory."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ..api.experiments import ComparedJob, ComparedMetric, Comparison
from ..catalog.serialize import utc
from ..errors import BadRequest

if TYPE_CHECKING:
    from ..platform import Platform

# a series whose name has one of these words is better when smaller; any other when larger
SMALLER_IS_BETTER = ("loss", "error", "mse", "mae", "rmse", "perplexity", "time")
MAX_JOBS = 20
# 2 to MAX_JOBS comma-separated job ids (the same job twice is compared with itself)
IDS_PATTERN = rf"^[^,]+(,[^,]+){{1,{MAX_JOBS - 1}}}$"


def smaller_is_better(series: str) -> bool:
    """Say whether lower values of a metric series are better (losses, errors)."""
    name = series.casefold()
    return any(word in name for word in SMALLER_IS_BETTER)


def flatten(parameters: dict, prefix: str = "") -> dict[str, Any]:
    """Return nested parameters as dotted keys."""
    flat = {}
    for key, value in parameters.items():
        if isinstance(value, dict) and value:
            flat |= flatten(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _metrics(platform: Platform, job) -> list[ComparedMetric]:
    project = job.project.name
    points = platform.jobs.metrics(project, job.id)  # each bucket keeps its lowest and highest: best is exact
    latest = platform.jobs.latest_metrics(project, job.id)
    compared = []
    for figure, series_points in sorted(points.items()):
        envelopes = (job.figures.get(figure) or {}).get("envelopes") or {}
        for series, curve in sorted(series_points.items()):
            best = None
            if curve:
                pick = min if smaller_is_better(series) else max
                best = pick(curve, key=lambda point: point[1])
            last = latest.get(figure, {}).get(series)
            compared.append(
                ComparedMetric(
                    figure=figure,
                    series=series,
                    points=(envelopes.get(series) or {}).get("count", len(curve)),
                    final=last[1] if last else None,
                    best=best[1] if best else None,
                    best_x=best[0] if best else None,
                )
            )
    return compared


def _duration(job) -> float | None:
    started = utc(job.started)
    if started is None:
        return None
    end = utc(job.finished) or datetime.now(timezone.utc)
    return (end - started).total_seconds()


def scalar_results(job) -> dict[str, Any]:
    """Return the scalar results a job sent, the last value of each name winning."""
    merged: dict[str, Any] = {}
    for event in job.results or []:
        merged |= event.get("values") or {}
    return merged


def _differing(values: list[dict]) -> list[str]:
    keys = sorted(set().union(*values))
    missing = object()
    return [key for key in keys if len({repr(value.get(key, missing)) for value in values}) > 1]


def compare_jobs(platform: Platform, project: str, job_ids: list[str]) -> Comparison:
    """Return two or more jobs of a project side by side (404 for a job that is not there)."""
    ids = list(job_ids)
    if not 2 <= len(ids) <= MAX_JOBS:
        raise BadRequest(f"ids: give 2 to {MAX_JOBS} jobs, got {len(ids)}", field="ids")
    compared = []
    for job_id in ids:
        job = platform.jobs.get(project, job_id)
        compared.append(
            ComparedJob(
                id=job.id,
                state=job.state,
                algorithm=job.algorithm_ref,
                function=job.function,
                inputs={key: value["version"] for key, value in job.inputs.items()},
                parameters=flatten(job.parameters),
                metrics=_metrics(platform, job),
                results=scalar_results(job),
                duration_seconds=_duration(job),
                peak_memory_mb=(job.usage or {}).get("peak_memory_mb"),
                limits=job.limits,
                experiment=job.experiment,
                trial=job.trial,
            )
        )
    metric_sets = [{f"{m.figure}/{m.series}" for m in job.metrics} for job in compared]
    return Comparison(
        jobs=compared,
        differing_parameters=_differing([job.parameters for job in compared]),
        differing_inputs=_differing([job.inputs for job in compared]),
        differing_algorithms=len({(job.algorithm, job.function) for job in compared}) > 1,
        common_metrics=sorted(set.intersection(*metric_sets)),
        differing_results=_differing([job.results for job in compared]),
    )
