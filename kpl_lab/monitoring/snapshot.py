"""One look at the platform: the machine's use and what the catalog says is queued, running, held and served.

A `Snapshot` is taken by the host's `Monitor` every `sample_seconds` in its background round,
off the request path; the Prometheus exposition, the alert rules, the usage history and the
admin page's totals all read the latest one. Reading it costs nothing; taking one costs a few
grouped queries.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, select

from ..api.jobs import JobState
from ..catalog.deployments import Deployment, DeploymentMetrics, Replica
from ..catalog.experiments import Experiment
from ..catalog.jobs import Job, Reservation
from ..catalog.models import (
    Algorithm,
    AlgorithmVersion,
    Dataset,
    DatasetVersion,
    Model,
    ModelVersion,
    Project,
)
from ..catalog.serialize import utc

RECENT_SECONDS = 600  # a job that failed this recently counts as just failed
ERROR_WINDOW_SECONDS = 300  # a deployment's error rate is over this span
ERROR_MIN_REQUESTS = 10  # fewer requests in the span say nothing about its error rate
CATALOG = {"datasets": (Dataset, DatasetVersion), "models": (Model, ModelVersion)}
CATALOG["algorithms"] = (Algorithm, AlgorithmVersion)


@dataclass
class Snapshot:
    """The platform at one time (`time`: epoch seconds)."""

    time: float
    machine: dict  # kpl_lab.monitoring.machine.sample()
    jobs: dict[tuple[str, str], int] = field(default_factory=dict)  # (project, state) -> jobs
    trials: dict[tuple[str, str], int] = field(default_factory=dict)  # (project, state) -> trial jobs
    experiments: dict[tuple[str, str], int] = field(default_factory=dict)  # (project, state) -> experiments
    running: list[dict] = field(default_factory=list)  # running jobs: id, project, user, latest sample
    failed: dict[str, list[str]] = field(default_factory=dict)  # project -> jobs failed lately
    started: list[tuple[str, float]] = field(default_factory=list)  # (project, queue wait s) since last look
    reservations: list[dict] = field(default_factory=list)  # project, kind, owner, user, cpu, memory, devices
    deployments: list[dict] = field(default_factory=list)  # project, name, replicas by version, error rate
    catalog: dict[tuple[str, str], tuple[int, int]] = field(
        default_factory=dict
    )  # (project, kind) -> n, bytes
    imports: dict[str, int] = field(default_factory=dict)  # state -> dataset imports in flight

    @property
    def projects(self) -> set[str]:
        """Return every project the snapshot names."""
        found = {project for project, _ in self.jobs} | {project for project, _ in self.catalog}
        return found | {r["project"] for r in self.reservations} | {d["project"] for d in self.deployments}

    def totals(self) -> dict[str, int]:
        """Return the platform's totals: datasets, models, algorithms, running, queued and finished jobs."""
        by_state: Counter[str] = Counter()
        for (_, state), count in self.jobs.items():
            by_state[state] += count
        kinds: Counter[str] = Counter()
        for (_, kind), (count, _) in self.catalog.items():
            kinds[kind] += count
        finished = sum(
            by_state[s] for s in (JobState.succeeded, JobState.failed, JobState.stopped, JobState.lost)
        )
        return {
            "datasets": kinds["datasets"],
            "models": kinds["models"],
            "algorithms": kinds["algorithms"],
            "jobs_queued": by_state[JobState.queued.value],
            "jobs_running": by_state[JobState.running.value],
            "jobs_finished": finished,
            "jobs_failed": by_state[JobState.failed.value],
            "deployments": len(self.deployments),
        }

    def gpu_utilization(self) -> dict[int, float]:
        """Return each GPU's utilization percent by index."""
        return {gpu["index"]: gpu["utilization_percent"] for gpu in self.machine.get("gpus", [])}


def _grouped(session, query) -> dict[tuple[str, str], int]:
    return {(project, state): count for project, state, count in session.execute(query)}


def _reservations(session) -> list[dict]:
    """Return every reservation with the user it belongs to."""
    rows = list(session.scalars(select(Reservation).order_by(Reservation.id)))
    job_users = dict(
        session.execute(
            select(Job.id, Job.user).where(Job.id.in_([r.owner_id for r in rows if r.owner_kind == "job"]))
        ).all()
    )
    replica_users = dict(
        session.execute(
            select(Replica.id, Deployment.user)
            .join(Deployment)
            .where(Replica.id.in_([r.owner_id for r in rows if r.owner_kind == "deployment"]))
        ).all()
    )
    found = []
    for row in rows:
        if row.owner_kind == "notebook":
            user = row.owner_id.split("/", 1)[0]
        elif row.owner_kind == "job":
            user = job_users.get(row.owner_id, "")
        else:
            user = replica_users.get(row.owner_id, "")
        devices = {kind: list(indexes) for kind, indexes in (row.devices or {}).items() if kind != "shared"}
        found.append(
            {
                "project": row.project,
                "kind": row.owner_kind,
                "owner": row.owner_id,
                "user": user,
                "cpu": row.cpu,
                "memory": row.memory,
                "devices": devices,
            }
        )
    return found


def _deployments(session, now: datetime) -> list[dict]:
    """Return each deployment with its replicas by version and its errors over the last span."""
    since = now - timedelta(seconds=ERROR_WINDOW_SECONDS)
    traffic: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for deployment_id, requests, errors in session.execute(
        select(DeploymentMetrics.deployment_id, DeploymentMetrics.requests, DeploymentMetrics.errors).where(
            DeploymentMetrics.start >= since
        )
    ):
        traffic[deployment_id][0] += requests
        traffic[deployment_id][1] += errors
    found = []
    for deployment, project in session.execute(select(Deployment, Project.name).join(Project)):
        replicas = Counter(replica.model_ref for replica in deployment.replica_rows)
        requests, errors = traffic.get(deployment.id, (0, 0))
        found.append(
            {
                "project": project,
                "name": deployment.name,
                "user": deployment.user,
                "wanted": deployment.replicas,
                "replicas": dict(replicas),
                "requests": requests,
                "errors": errors,
                "error_percent": 100.0 * errors / requests if requests >= ERROR_MIN_REQUESTS else None,
            }
        )
    return found


def _catalog(session) -> dict[tuple[str, str], tuple[int, int]]:
    """Return (project, kind) -> (how many named objects, bytes of their versions)."""
    found: dict[tuple[str, str], tuple[int, int]] = {}
    for kind, (named, version) in CATALOG.items():
        counts = dict(
            session.execute(
                select(Project.name, func.count(named.id)).join(named).group_by(Project.name)
            ).all()
        )
        sizes = dict(
            session.execute(
                select(Project.name, func.coalesce(func.sum(version.size_bytes), 0))
                .select_from(version)
                .join(named)
                .join(Project)
                .group_by(Project.name)
            ).all()
        )
        for project in counts.keys() | sizes.keys():
            found[(project, kind)] = (int(counts.get(project, 0)), int(sizes.get(project, 0)))
    return found


def take(platform: Any, machine: dict, since: datetime | None = None, imports: Any = None) -> Snapshot:
    """Return the platform now; `since`: the jobs started after it count their queue wait in `started`."""
    now = datetime.now(UTC)
    snapshot = Snapshot(time=time.time(), machine=machine)
    with platform.session() as session:
        snapshot.jobs = _grouped(
            session,
            select(Project.name, Job.state, func.count(Job.id))
            .join(Project)
            .group_by(Project.name, Job.state),
        )
        snapshot.trials = _grouped(
            session,
            select(Project.name, Job.state, func.count(Job.id))
            .join(Project)
            .where(Job.experiment.is_not(None))
            .group_by(Project.name, Job.state),
        )
        snapshot.experiments = _grouped(
            session,
            select(Project.name, Experiment.state, func.count(Experiment.id))
            .join(Project)
            .group_by(Project.name, Experiment.state),
        )
        for job, project in session.execute(
            select(Job, Project.name).join(Project).where(Job.state == JobState.running.value)
        ):
            snapshot.running.append(
                {
                    "id": job.id,
                    "project": project,
                    "user": job.user,
                    "latest": (job.usage or {}).get("latest") or {},
                }
            )
        recent = now - timedelta(seconds=RECENT_SECONDS)
        for job_id, project in session.execute(
            select(Job.id, Project.name)
            .join(Project)
            .where(Job.state == JobState.failed.value, Job.finished >= recent)
            .order_by(Job.finished)
        ):
            snapshot.failed.setdefault(project, []).append(job_id)
        if since is not None:
            for project, created, started in session.execute(
                select(Project.name, Job.created, Job.started).join(Project).where(Job.started > since)
            ):
                snapshot.started.append((project, max(0.0, (utc(started) - utc(created)).total_seconds())))
        snapshot.reservations = _reservations(session)
        snapshot.deployments = _deployments(session, now)
        snapshot.catalog = _catalog(session)
    if imports is not None:
        snapshot.imports = imports.counts()
    return snapshot
