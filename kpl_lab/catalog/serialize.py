"""The one place that turns catalog rows and jobs into the response models of `kpl_lab.api`.

Handlers answer these models; the CLI's `--json` prints the same bodies (`*_json`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..api.algorithms import Algorithm, AlgorithmVersion, AlgorithmVersionDetail
from ..api.base import utc
from ..api.catalog import CatalogVersion
from ..api.datasets import Dataset, DatasetVersion, DatasetVersionDetail
from ..api.jobs import FigureLabels, Job, Metrics
from ..api.models import Model, ModelVersion
from ..api.usage import JobUsage
from .datasets import part_order

KIND_PARENT = {"dataset": "dataset", "model": "model", "algorithm": "algorithm"}
VERSION_MODELS = {"dataset": DatasetVersion, "model": ModelVersion, "algorithm": AlgorithmVersion}
NAMED_MODELS = {"dataset": Dataset, "model": Model, "algorithm": Algorithm}


def version_model(kind: str, row: Any) -> CatalogVersion:
    """Return a dataset, model or algorithm version."""
    data = {
        "name": getattr(row, KIND_PARENT[kind]).name,
        "version": row.version,
        "ref": row.ref,
        "description": row.description or "",
        "size_bytes": row.size_bytes,
        "lineage": row.lineage,
        "created": utc(row.created),
    }
    if kind == "dataset":
        data |= {
            "record_count": row.record_count,
            "parts": {p: row.parts[p] for p in part_order(list(row.parts))},
        }
    elif kind == "model":
        data |= {"files": row.files, "aliases": model_version_aliases(row)}
    else:
        data |= {"functions": row.functions, "parameters": row.parameters}
    return VERSION_MODELS[kind].model_validate(data)


def model_version_aliases(row: Any) -> list[str]:
    """Return the aliases of a model version, from its model's aliases when they were loaded."""
    from sqlalchemy import inspect
    from sqlalchemy.orm.base import NO_VALUE

    model = inspect(row).attrs.model.loaded_value
    if model is NO_VALUE:
        return []
    aliases = inspect(model).attrs.aliases.loaded_value
    if aliases is NO_VALUE:  # a model just created has none yet
        return []
    return sorted(a.alias for a in aliases if a.model_version_id == row.id)


def dataset_detail_model(row: Any, schemas: dict) -> DatasetVersionDetail:
    """Return a dataset version with the record type of each part."""
    return DatasetVersionDetail.model_validate(version_json("dataset", row) | {"schemas": schemas})


def algorithm_detail_model(row: Any, algorithm: Any, image_used: bool = False) -> AlgorithmVersionDetail:
    """Return an algorithm version with its functions, resources, ports and parameter schema.

    `image_used`: whether this platform's jobs run in the algorithm's image (`Executor.uses_images`).
    """
    spec = algorithm.spec
    functions = {
        name: {
            "cmd": function.cmd,
            "resource": dataclasses.asdict(function.resource),
            "inputs": [dataclasses.asdict(port) for port in function.inputs],
            "outputs": [{"key": port.key, "name": port.name} for port in function.outputs],
        }
        for name, function in spec.functions.items()
    }
    return AlgorithmVersionDetail.model_validate(
        version_json("algorithm", row)
        | {
            "image": {
                "from_image": spec.image.from_image,
                "runs": list(spec.image.runs),
                "used": image_used,
            },
            "function_specs": functions,
            "parameter_descriptions": algorithm.parameters.descriptions,
            "parameter_schema": algorithm.parameters.schema(),
        }
    )


def named_model(kind: str, named: Any) -> Dataset | Model | Algorithm:
    """Return a dataset, model or algorithm with its versions (oldest first)."""
    extra = {"aliases": {a.alias: a.model_version.version for a in named.aliases}} if kind == "model" else {}
    return NAMED_MODELS[kind](
        name=named.name,
        description=named.description or "",
        created=utc(named.created),
        versions=[version_model(kind, v) for v in named.versions],
        **extra,
    )


def matches(named: Any, query: str | None) -> bool:
    """Say whether a named object matches a case-insensitive search in names and descriptions."""
    if not query:
        return True
    query = query.casefold()
    texts = [named.name, named.description or ""] + [v.description or "" for v in named.versions]
    return any(query in text.casefold() for text in texts)


def job_model(job: Any, progress: float, eta_seconds: float | None, queue: Any = None) -> Job:
    """Return a job with its progress and time left (and why it waits, while queued)."""
    return Job.model_validate(
        {
            "id": job.id,
            "project": job.project.name,
            "algorithm": job.algorithm_ref,
            "function": job.function,
            "state": job.state,
            "progress": progress,
            "eta_seconds": eta_seconds,
            "inputs": job.inputs,
            "parameters": job.parameters,
            "outputs": job.outputs,
            "saves": job.saves,
            "results": job.results,
            "figures": sorted(job.figures),
            "limits": job.limits,
            "requests": job.requests,
            "assigned_devices": job.assigned_devices,
            "executor": job.executor,
            "enforcement": job.enforcement,
            "exit_code": job.exit_code,
            "reason": job.reason,
            "queue": queue.to_json() if queue is not None and job.state == "queued" else None,
            "last_log_lines": job.last_log_lines,
            "created": utc(job.created),
            "started": utc(job.started),
            "finished": utc(job.finished),
            "copied_from": job.copied_from,
            "resumed_from": job.resumed_from,
            "experiment": job.experiment,
            "trial": job.trial,
        }
    )


def metrics_model(job: Any, figures: dict[str, dict[str, list]], max_points: int) -> Metrics:
    """Return a job's metric points (figure -> series -> points, from JobService.metrics) and axis names."""
    labels = {
        title: FigureLabels(
            x_name=fields.get("x_name"), y1_name=fields.get("y1_name"), y2_name=fields.get("y2_name")
        )
        for title, fields in job.figures.items()
    }
    return Metrics(max_points=max_points, figures=figures, labels=labels)


def usage_model(usage: dict) -> JobUsage:
    """Return a job's resource use as kept on the job ({} before the first sample)."""
    return JobUsage(
        latest=usage.get("latest"),
        peak_memory_mb=usage.get("peak_memory_mb"),
        history=usage.get("history") or [],
    )


def version_json(kind: str, row: Any) -> dict:
    """Return a version as the JSON data the REST API answers."""
    return version_model(kind, row).model_dump(mode="json", by_alias=True)


def named_json(kind: str, named: Any) -> dict:
    """Return a dataset, model or algorithm as the JSON data the REST API answers."""
    return named_model(kind, named).model_dump(mode="json", by_alias=True)


def job_json(job: Any, progress: float, eta_seconds: float | None, queue: Any = None) -> dict:
    """Return a job as the JSON data the REST API answers."""
    return job_model(job, progress, eta_seconds, queue).model_dump(mode="json", by_alias=True)


def metrics_json(job: Any, figures: dict[str, dict[str, list]], max_points: int) -> dict:
    """Return a job's metrics as the JSON data the REST API answers."""
    return metrics_model(job, figures, max_points).model_dump(mode="json")
