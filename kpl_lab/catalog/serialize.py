"""Catalog rows and jobs as the JSON bodies of docs/openapi.yaml."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

KIND_PARENT = {"dataset": "dataset", "model": "model", "algorithm": "algorithm"}


def iso(moment: datetime | None) -> str | None:
    """Return an ISO 8601 time in UTC (SQLite gives naive datetimes back)."""
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.isoformat()


def version_json(kind: str, row: Any) -> dict:
    """Return a dataset, model or algorithm version."""
    data = {
        "name": getattr(row, KIND_PARENT[kind]).name,
        "version": row.version,
        "ref": row.ref,
        "description": row.description,
        "size_bytes": row.size_bytes,
        "lineage": row.lineage,
        "created": iso(row.created),
    }
    if kind == "dataset":
        data |= {"record_count": row.record_count, "parts": row.parts}
    elif kind == "model":
        data |= {"files": row.files}
    else:
        data |= {"functions": row.functions, "parameters": row.parameters}
    return data


def named_json(kind: str, named: Any) -> dict:
    """Return a dataset, model or algorithm with its versions (oldest first)."""
    return {
        "name": named.name,
        "description": named.description,
        "created": iso(named.created),
        "versions": [version_json(kind, v) for v in named.versions],
    }


def matches(named: Any, query: str | None) -> bool:
    """Say whether a named object matches a case-insensitive search in names and descriptions."""
    if not query:
        return True
    query = query.casefold()
    texts = [named.name, named.description or ""] + [v.description or "" for v in named.versions]
    return any(query in text.casefold() for text in texts)


def job_json(job: Any, fraction: float, eta_seconds: float | None) -> dict:
    """Return a job with its progress and time left."""
    return {
        "id": job.id,
        "project": job.project.name,
        "algorithm": job.algorithm_ref,
        "function": job.function,
        "state": job.state,
        "progress": fraction,
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
        "last_log_lines": job.last_log_lines,
        "created": iso(job.created),
        "started": iso(job.started),
        "finished": iso(job.finished),
        "copied_from": job.copied_from,
        "resumed_from": job.resumed_from,
    }
