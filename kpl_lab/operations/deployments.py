"""Deployments: create, list, show, delete, canary, promote, logs, metrics, API keys, and predictions."""

from __future__ import annotations

import getpass
import json
from datetime import UTC, datetime, timedelta

from ..api.catalog import Deleted
from ..api.deployments import (
    CanaryRequest,
    Deployment,
    DeploymentKey,
    DeploymentKeyCreated,
    DeploymentKeyList,
    DeploymentList,
    DeploymentLogs,
    DeploymentMetricsHistory,
    DeploymentRequest,
    MetricsPoint,
    ReplicaLog,
    VersionMetrics,
)
from ..catalog.serialize import utc
from ..errors import BadRequest, ModelFailed
from .caller import Caller
from .spec import Raw
from .uploads import Upload

DEFAULT_SPAN = timedelta(hours=1)  # of the metrics history without ?since=


def deployment_model(service, row, with_metrics: bool = True) -> Deployment:
    """Return a deployment as the API answers it (the serving package is loaded when a deployment is asked)."""
    from ..serving.describe import deployment_model as describe

    return describe(service, row, with_metrics)


def list_deployments(caller: Caller) -> DeploymentList:
    """List the project's deployments with their state and replicas."""
    service = caller.platform.deployments
    return DeploymentList(
        deployments=[
            deployment_model(service, row, with_metrics=False) for row in service.list(caller.project)
        ]
    )


def create(caller: Caller, body: DeploymentRequest) -> Deployment:
    """Deploy a model version (its replicas start at once)."""
    service = caller.platform.deployments
    caller.audit_target = body.name
    row = service.create(
        caller.project, body.name, body.model, body.replicas, body.algorithm, user=caller.user
    )
    return deployment_model(service, row, with_metrics=False)


def show_deployment(caller: Caller, name: str) -> Deployment:
    """Show a deployment with its replicas and request metrics per version."""
    service = caller.platform.deployments
    return deployment_model(service, service.get(caller.project, name))


def delete(caller: Caller, name: str) -> Deleted:
    """Stop a deployment's replicas, free their resources and forget it."""
    return Deleted(deleted=caller.platform.deployments.delete(caller.project, name))


def canary(caller: Caller, name: str, body: CanaryRequest) -> Deployment:
    """Serve a canary version to a percent of the requests."""
    service = caller.platform.deployments
    row = service.canary(
        caller.project, name, body.model, body.weight, body.algorithm, body.sticky_header, body.replicas
    )
    return deployment_model(service, row, with_metrics=False)


def promote(caller: Caller, name: str) -> Deployment:
    """Make the canary production once its replicas are ready."""
    service = caller.platform.deployments
    return deployment_model(service, service.promote(caller.project, name), with_metrics=False)


def logs(caller: Caller, name: str, lines: int) -> DeploymentLogs:
    """Answer the last lines of each replica's output."""
    found = caller.platform.deployments.logs(caller.project, name, lines)
    return DeploymentLogs(logs=[ReplicaLog(**log) for log in found])


def since_time(text: str | None) -> datetime:
    """Return the `since` query argument as a UTC time (default: an hour ago; a bucket's start is kept)."""
    if not text:
        return datetime.now(UTC) - DEFAULT_SPAN
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise BadRequest(
            f"since: expected an ISO 8601 time such as 2026-11-26T12:00:00Z, got {text!r}", field="since"
        ) from None
    from ..serving import history

    moment = utc(moment)
    return moment.replace(second=moment.second - moment.second % history.BUCKET_SECONDS, microsecond=0)


def metrics(caller: Caller, name: str, since: str | None) -> DeploymentMetricsHistory:
    """Answer the request metrics per model version over time (10 s intervals) since a time."""
    from ..serving import history

    start = since_time(since)
    row = caller.platform.deployments.get(caller.project, name)
    series, totals = history.series(caller.platform, row.id, start)
    return DeploymentMetricsHistory(
        interval_seconds=history.BUCKET_SECONDS,
        since=start,
        series={v: [MetricsPoint(**p) for p in points] for v, points in series.items()},
        totals={v: VersionMetrics(**t) for v, t in totals.items()},
    )


def _key(row) -> DeploymentKey:
    return DeploymentKey(id=row.id, prefix=row.prefix, user=row.user, created=utc(row.created))


def list_keys(caller: Caller, name: str) -> DeploymentKeyList:
    """List a deployment's API keys (never the keys themselves)."""
    return DeploymentKeyList(
        keys=[_key(row) for row in caller.platform.deployments.keys.list(caller.project, name)]
    )


def create_key(caller: Caller, name: str) -> DeploymentKeyCreated:
    """Make an API key of the deployment; the answer shows it this once."""
    # a command on its own home: the account that runs it made the key
    user = caller.user or getpass.getuser()
    row, key = caller.platform.deployments.keys.create(caller.project, name, user)
    caller.audit_target = f"{name}/{row.id}"  # the key's id, never the key
    return DeploymentKeyCreated(**_key(row).model_dump(), key=key)


def revoke_key(caller: Caller, name: str, key_id: str) -> Deleted:
    """Revoke one API key of a deployment."""
    return Deleted(deleted=caller.platform.deployments.keys.revoke(caller.project, name, key_id))


def _model_error(body: bytes) -> str:
    try:
        return str(json.loads(body).get("error") or "the model failed")
    except (ValueError, AttributeError):
        return "the model failed"


async def predict(caller: Caller, name: str, upload: Upload) -> Raw:
    """Send one request body to a ready replica; answer the model's JSON with the version that served it."""
    from ..serving.gateway import VERSION_HEADER

    prediction = await caller.gateway.predict(
        caller.project, name, upload.read(), upload.content_type, upload.header
    )
    headers = {VERSION_HEADER: prediction.model_version}
    if prediction.status >= 400:  # the model's error, in the Error body every failure has
        error = (ModelFailed if prediction.status >= 500 else BadRequest)(_model_error(prediction.body))
        error.status = min(prediction.status, 502)
        error.headers = headers
        raise error
    return Raw(prediction.body, "application/json", headers, status=prediction.status)
