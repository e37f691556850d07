"""Deployments: models served over HTTP, their replicas, canary split and request metrics."""

from __future__ import annotations

from datetime import datetime
from enum import Enum

from pydantic import BaseModel, ConfigDict, Field

from .base import Body
from .catalog import ModelRef, Name


class DeploymentState(str, Enum):
    """Where a deployment is: starting until its replicas answer /health, then ready or worse."""

    starting = "starting"
    ready = "ready"
    degraded = "degraded"  # some replicas not ready (restarting after a crash, a canary starting)
    failed = "failed"  # no production replica can start; the replicas' last log lines say why
    stopped = "stopped"


class DeploymentRequest(BaseModel):
    """What to deploy: a model version, its replicas, and the algorithm whose deploy serves it."""

    model_config = ConfigDict(extra="forbid")

    name: Name
    model: ModelRef = Field(description="NAME, NAME:VERSION or NAME@ALIAS")
    replicas: int = Field(default=1, ge=1, le=64)
    algorithm: str | None = Field(
        default=None, description="NAME[:VERSION]; default: the algorithm of the job that made the model"
    )


class CanaryRequest(BaseModel):
    """A canary version and the percent of requests it gets."""

    model_config = ConfigDict(extra="forbid")

    model: ModelRef = Field(description="NAME:VERSION or NAME@ALIAS")
    weight: int = Field(ge=0, le=100, description="percent of requests")
    algorithm: str | None = Field(default=None, description="default: the algorithm of the model's job")
    sticky_header: str | None = Field(
        default=None, description="request header whose value keeps a caller on one version (empty: none)"
    )
    replicas: int = Field(default=1, ge=1, le=64)


class Replica(Body):
    """One replica process and its state."""

    id: str
    model_version: str = Field(description="NAME:VERSION it serves")
    role: str = Field(description="production, canary, or retiring (after a promote)")
    state: str = Field(description="starting, ready, unhealthy, restarting, failed or stopped")
    port: int | None = Field(description="the TCP port given to its server (KPL_DEPLOY_PORT)")
    url: str | None = Field(
        description="where the platform reaches its server once it was ready: unix:PATH (a socket only "
        "the platform and the deployment's user open), or http://HOST:PORT for a server on its port"
    )
    restarts: int
    reason: str | None
    last_log_lines: str | None = Field(description="the server's last output, when failed")


class VersionMetrics(Body):
    """Requests served by one model version: their count, errors and latency percentiles."""

    requests: int
    errors: int
    p50_ms: float | None
    p99_ms: float | None


class MetricsPoint(Body):
    """What one model version answered in one interval, as the gateway saw it."""

    time: datetime = Field(description="the interval's start")
    requests: int
    errors: int = Field(description="answers other than 2xx, and 503s while no replica was ready")
    p50_ms: float | None = Field(description="gateway latency (within 5 %); null: no replica answered")
    p99_ms: float | None


class DeploymentMetricsHistory(Body):
    """Request metrics of a deployment over time, per model version."""

    interval_seconds: int = Field(description="the length of each point's interval")
    since: datetime
    series: dict[str, list[MetricsPoint]] = Field(
        description="NAME:VERSION -> points by time; intervals without requests have none"
    )
    totals: dict[str, VersionMetrics] = Field(description="NAME:VERSION -> the sums of `series`")


class Deployment(Body):
    """A deployment with its versions, replicas and request metrics per version."""

    name: str
    state: DeploymentState
    reason: str
    replicas: int = Field(description="replicas of the production version")
    model_version: str | None = Field(description="production NAME:VERSION")
    algorithm_version: str | None
    canary_model_version: str | None
    canary_weight: int
    sticky_header: str
    created: datetime | None
    replica_states: list[Replica]
    metrics: dict[str, VersionMetrics] = Field(
        description="NAME:VERSION -> request metrics as its live replicas counted them since they started"
    )
    totals: dict[str, VersionMetrics] = Field(
        description="NAME:VERSION -> request metrics as the gateway counted them over the kept history "
        "(7 days; written every few seconds); empty unless asked for one deployment"
    )
    gateway_url: str | None = Field(
        description="URL of this deployment's predict on the gateway process (127.0.0.1, its own port; "
        "under JupyterHub the hub's /services/kpl-gateway/), for callers with an API key or, under "
        "JupyterHub, their own hub API token; null while it does not run"
    )


class DeploymentList(Body):
    """The deployments of a project."""

    deployments: list[Deployment]


class ReplicaLog(Body):
    """The last lines a replica printed."""

    replica: str
    model_version: str
    text: str


class DeploymentLogs(Body):
    """The last lines of each replica's output."""

    logs: list[ReplicaLog]


class DeploymentKey(Body):
    """An API key of a deployment, as listed: never the key itself."""

    id: str = Field(description="what `key revoke` names")
    prefix: str = Field(description="the key's first characters")
    user: str
    created: datetime | None


class DeploymentKeyList(Body):
    """The API keys of a deployment."""

    keys: list[DeploymentKey]


class DeploymentKeyCreated(DeploymentKey):
    """A new API key: `key` is shown this once (the platform keeps only its SHA-256 digest)."""

    key: str = Field(
        description="send it as `Authorization: Bearer <key>` or `X-KPL-API-Key: <key>` to this "
        "deployment's predict; it opens nothing else"
    )
