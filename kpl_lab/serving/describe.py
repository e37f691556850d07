"""A deployment as the REST API and `kpl-lab deployment show --json` answer it."""

from __future__ import annotations

from ..api.deployments import Deployment, Replica, VersionMetrics
from ..catalog.serialize import utc
from . import history
from .service import DeploymentService

REPLICA_FIELDS = ("port", "url", "reason", "last_log_lines")


def deployment_model(service: DeploymentService, row, with_metrics: bool = True) -> Deployment:
    """Return a deployment row with its state, replicas and (asked for) request metrics and totals per version."""
    states = service.replica_states(row)
    state, reason = service.state(row, states)
    found = service.metrics(row, states) if with_metrics else {}
    kept = history.totals(service.platform, row.id) if with_metrics else {}
    return Deployment(
        name=row.name,
        state=state,
        reason=reason,
        replicas=row.replicas,
        model_version=row.model_version.ref if row.model_version else None,
        algorithm_version=row.algorithm_version.ref if row.algorithm_version else None,
        canary_model_version=row.canary_model_version.ref if row.canary_model_version else None,
        canary_weight=row.canary_weight,
        sticky_header=row.sticky_header,
        created=utc(row.created),
        replica_states=[
            Replica(
                id=s["id"],
                model_version=s["model_version"],
                role=s["role"],
                state=s["state"],
                restarts=s.get("restarts", 0),
                **{key: s.get(key) for key in REPLICA_FIELDS},
            )
            for s in states
        ],
        metrics={version: VersionMetrics(**values) for version, values in found.items()},
        totals={version: VersionMetrics(**values) for version, values in kept.items()},
        gateway_url=service.gateway_url(row.name),
    )
