"""Deployments: create, canary, promote, delete, and their state, logs and metrics.

A deployment serves a production model version with `replicas` replicas and optionally a
canary version (its own replicas) that gets `canary_weight` percent of the requests.
Each replica holds a ledger reservation (owner kind `deployment`) from its start until it
is stopped. With `replica_backend = "local"` replicas are detached supervised processes
(`kpl_lab.serving.replica`): they keep serving while the platform restarts; `reconcile()`
restarts those whose supervisor died (a reboot). With `"kubernetes"` each served version is
a Kubernetes Deployment with a Service (`kpl_lab.serving.kubernetes`) scaled to its replicas;
Kubernetes restarts them, and the gateway reaches them through the Service.
"""

from __future__ import annotations

import asyncio
import functools
import os
import secrets
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import delete, select
from traitlets import Bool, Enum, Float, Integer, Unicode
from traitlets.config import LoggingConfigurable

from ..catalog.deployments import Deployment, DeploymentMetrics, Replica
from ..catalog.models import Project
from ..catalog.storage import check_name
from ..engine.launch import Resources
from ..engine.local import LocalExecutor
from ..engine.runfolder import process_start_time, read_own_json
from ..errors import BadRequest, Conflict, NotFound, Unavailable
from . import metrics, replicas
from .keys import DeploymentKeys
from .readiness import all_ready

if TYPE_CHECKING:
    from ..catalog.models import AlgorithmVersion, ModelVersion
    from ..platform import Platform
    from .kubernetes import KubernetesDeployments

OWNER_KIND = "deployment"
HOST = "127.0.0.1"
WAIT_INTERVAL = 0.1
GATEWAY_START_SECONDS = 30.0  # how long `create` waits for a starting gateway process to listen


@dataclass
class Routing:
    """What the gateway needs to route one request: the versions, the split and the ready replicas."""

    production: str  # NAME:VERSION
    canary: str | None
    canary_weight: int
    sticky_header: str
    ready: dict[str, list[str]] = field(default_factory=dict)  # NAME:VERSION -> URLs of ready replicas
    state: str = "starting"
    reason: str = ""


class DeploymentService(LoggingConfigurable):
    """Deployments of every project: supervised replicas under the ledger, routed by the gateway."""

    grace_seconds = Float(5.0, help="Seconds between SIGTERM and SIGKILL when a replica stops.").tag(
        config=True
    )
    max_failures = Integer(
        5, help="Crashes in a row, never ready in between, after which a replica is failed."
    ).tag(config=True)
    backoff_seconds = Float(0.5, help="First wait before restarting a crashed replica (doubles).").tag(
        config=True
    )
    max_backoff_seconds = Float(30.0, help="Longest wait before restarting a crashed replica.").tag(
        config=True
    )
    drain_seconds = Float(
        1.5, help="Seconds old replicas keep serving after a promote, so requests in flight finish."
    ).tag(config=True)
    replica_backend = Enum(
        ["local", "kubernetes"],
        "local",
        help="Where replicas run: local supervised processes, or a Kubernetes Deployment and Service "
        "per served version, with the KubernetesExecutor's settings (docs/kubernetes.md).",
    ).tag(config=True)

    gateway_process = Bool(
        True,
        help="Run the gateway process (one per platform, on a loopback port of its own) while a deployment "
        "exists: callers with an API key predict there without the Jupyter server's per-request work.",
    ).tag(config=True)
    gateway_port = Integer(
        0, help="Port of the gateway process on 127.0.0.1; 0: a free one, kept across its restarts."
    ).tag(config=True)
    gateway_always = Bool(
        False,
        help="Keep the gateway process running while this process runs, with no deployment too (under "
        "JupyterHub: the hub waits for and checks the kpl-gateway service's URL).",
    ).tag(config=True)
    gateway_public_url = Unicode(
        "",
        help="Base URL callers reach the gateway process at (under JupyterHub: the hub's URL and "
        "/services/kpl-gateway, the service `kpl-lab up` registers); empty: http://127.0.0.1:PORT.",
    ).tag(config=True)

    def __init__(self, platform: Platform, **kwargs) -> None:
        super().__init__(parent=platform, **kwargs)
        self.platform = platform
        self._kubernetes: KubernetesDeployments | None = None
        self.generation = 0  # counts changes made here: the gateway reads a changed routing table at once

    @property
    def kubernetes(self) -> KubernetesDeployments:
        """Return the Kubernetes side of deployments, with the job executor's cluster settings."""
        if self._kubernetes is None:
            from ..engine.kubernetes import KubernetesExecutor
            from .kubernetes import KubernetesDeployments

            executor = self.platform.jobs.executor
            if not isinstance(executor, KubernetesExecutor):
                executor = KubernetesExecutor(parent=self)
            self._kubernetes = KubernetesDeployments(executor)
        return self._kubernetes

    @functools.cached_property
    def keys(self) -> DeploymentKeys:
        """Return the API keys of deployments."""
        return DeploymentKeys(self)

    @property
    def ledger(self):
        """Return the platform's ledger (shared with jobs and notebooks)."""
        return self.platform.jobs.ledger

    # reading

    def _get(self, session, project: str, name: str) -> Deployment:
        row = session.scalar(
            select(Deployment)
            .join(Project)
            .where(Project.name == check_name(project, "project"), Deployment.name == check_name(name))
        )
        if row is None:
            raise NotFound(f"deployment {name!r} not found in project {project!r}")
        return row

    def get(self, project: str, name: str) -> Deployment:
        """Return one deployment of a project with its replicas."""
        with self.platform.session() as session:
            row = self._get(session, project, name)
            _load(row)
            return row

    def list(self, project: str) -> list[Deployment]:
        """Return a project's deployments by name."""
        with self.platform.session() as session:
            rows = list(
                session.scalars(
                    select(Deployment)
                    .join(Project)
                    .where(Project.name == check_name(project, "project"))
                    .order_by(Deployment.name)
                )
            )
            for row in rows:
                _load(row)
            return rows

    def run_dir(self, row: Replica) -> Path:
        """Return a replica's run folder."""
        return self.platform.storage.absolute(row.run_dir)

    def replica_states(self, deployment: Deployment) -> list[dict]:
        """Return each replica's id, model version, role (production, canary, retiring) and status."""
        states = []
        served: dict[str, dict] = {}  # Kubernetes: Deployment name -> its state, read once
        for row in deployment.replica_rows:
            if "kubernetes" in row.handle:
                status = self._pod_status(deployment, row, served)
            else:
                status = replicas.status(self.run_dir(row), row.handle)  # its `url` once it was ready
            states.append(
                {"id": row.id, "model_version": row.model_ref, "role": _role(deployment, row), **status}
            )
        return states

    def _pod_status(self, deployment: Deployment, row: Replica, served: dict[str, dict]) -> dict:
        """Return the status of a replica of a Kubernetes Deployment: the first `ready` of its version's rows are ready."""
        name, project = row.handle["kubernetes"], deployment.project.name
        if name not in served:
            served[name] = _run(self.kubernetes.status(project, name))
        found = served[name]
        siblings = sorted(r.id for r in deployment.replica_rows if r.handle.get("kubernetes") == name)
        if siblings.index(row.id) < found["ready"]:
            return {"state": "ready", "restarts": 0, "url": self.kubernetes.url(project, name)}
        state = found["state"] if found["state"] in ("failed", "stopped") else "starting"
        return {"state": state, "restarts": 0, "reason": found["reason"]}

    def state(self, deployment: Deployment, states: list[dict] | None = None) -> tuple[str, str]:
        """Return the deployment's state (starting, ready, degraded, failed, stopped) and why."""
        states = self.replica_states(deployment) if states is None else states
        serving = [s for s in states if s["role"] in ("production", "canary")]
        if not serving:
            return "stopped", "no replica runs"
        production = [s for s in serving if s["role"] == "production"]
        ready = [s for s in production if s["state"] == "ready"]
        if len(ready) == len(production) and all(s["state"] == "ready" for s in serving):
            return "ready", ""
        trouble = next((s for s in serving if s["state"] != "ready"), serving[0])
        reason = f"replica {trouble['id']} is {trouble['state']}"
        if trouble.get("reason"):
            reason += f": {trouble['reason']}"
        if ready:
            return "degraded", reason
        if all(s["state"] in ("failed", "stopped") for s in production):
            return "failed", reason
        if any(s["state"] != "starting" or s.get("restarts") for s in production):
            return "degraded", reason
        return "starting", reason

    def routing(self, project: str, name: str) -> Routing:
        """Return the versions, split and ready replica ports the gateway routes one request with."""
        deployment = self.get(project, name)
        states = self.replica_states(deployment)
        routing = Routing(
            production=deployment.model_version.ref if deployment.model_version else "",
            canary=deployment.canary_model_version.ref if deployment.canary_model_version else None,
            canary_weight=deployment.canary_weight,
            sticky_header=deployment.sticky_header,
        )
        for status in states:
            if status["role"] in ("production", "canary") and status["state"] == "ready":
                routing.ready.setdefault(status["model_version"], []).append(status["url"])
        routing.state, routing.reason = self.state(deployment, states)
        return routing

    def metrics(self, deployment: Deployment, states: list[dict] | None = None) -> dict[str, dict]:
        """Return model version -> requests, errors, p50_ms, p99_ms over its live replicas."""
        states = self.replica_states(deployment) if states is None else states
        counted = []
        for status in states:
            if status["state"] in ("ready", "unhealthy") and status.get("url"):
                counters = metrics.read_replica(status["url"])
                if counters is not None:
                    counted.append((status["model_version"], counters))
        found = metrics.summarize(counted)
        for version in _versions(deployment):
            found.setdefault(version, {"requests": 0, "errors": 0, "p50_ms": None, "p99_ms": None})
        return found

    def logs(self, project: str, name: str, lines: int = 100) -> list[dict]:
        """Return the last lines of each replica's output: [{"replica", "model_version", "text"}].

        A Kubernetes replica is a pod of its version's Deployment: named by the pod, one entry each.
        """
        deployment = self.get(project, name)
        found, served = [], set()
        for row in deployment.replica_rows:
            if "kubernetes" not in row.handle:
                text = replicas.tail(self.run_dir(row) / "output.log", lines)
                found.append({"replica": row.id, "model_version": row.model_ref, "text": text})
            elif row.model_ref not in served:  # one Deployment per version: its pods once
                served.add(row.model_ref)
                pods = _run(self.kubernetes.logs(project, name, row.model_ref, lines))
                found += [
                    {"replica": pod, "model_version": row.model_ref, "text": text} for pod, text in pods
                ]
        return found

    # changing

    def create(
        self,
        project: str,
        name: str,
        model: str,
        replica_count: int = 1,
        algorithm: str | None = None,
        user: str = "",
    ) -> Deployment:
        """Deploy a model version (NAME or NAME:VERSION) with `replica_count` replicas; they start now."""
        check_name(name)
        if not 1 <= replica_count <= 64:
            raise BadRequest(f"replicas: must be between 1 and 64, got {replica_count}", field="replicas")
        model_version, algorithm_version = self._resolve(project, model, algorithm)
        with self.platform.session(immediate=True) as session:
            proj = self.platform.catalog.ensure_project(session, project)
            exists = session.scalar(
                select(Deployment.id).where(Deployment.project_id == proj.id, Deployment.name == name)
            )
            if exists is not None:
                raise Conflict(f"deployment {name!r} already exists in project {project!r}", field="name")
            deployment = Deployment(
                project_id=proj.id,
                name=name,
                replicas=replica_count,
                model_version_id=model_version.id,
                algorithm_version_id=algorithm_version.id,
                canary_weight=0,
                sticky_header="",
                user=user,
            )
            session.add(deployment)
            session.flush()
            deployment_id = deployment.id
        try:
            for _ in range(replica_count):
                self._start_replica(project, name, deployment_id, model_version, algorithm_version, user)
        except BaseException:
            self.delete(project, name)
            raise
        self.generation += 1
        self.ensure_gateway()
        self._await_gateway()
        return self.get(project, name)

    def canary(
        self,
        project: str,
        name: str,
        model: str,
        weight: int,
        algorithm: str | None = None,
        sticky_header: str | None = None,
        replica_count: int = 1,
    ) -> Deployment:
        """Serve a canary version to `weight` percent of the requests (a new version replaces the old canary)."""
        if not 0 <= weight <= 100:
            raise BadRequest(f"weight: a percentage between 0 and 100, got {weight}", field="weight")
        model_version, algorithm_version = self._resolve(project, model, algorithm)
        deployment = self.get(project, name)
        if model_version.id == deployment.model_version_id:
            raise BadRequest(f"{model_version.ref} is already the production version", field="model")
        if model_version.id != deployment.canary_model_version_id:
            old = [
                r for r in deployment.replica_rows if r.model_version_id == deployment.canary_model_version_id
            ]
            with self.platform.session(immediate=True) as session:  # the old canary gets no traffic from now
                row = self._get(session, project, name)
                row.canary_model_version_id, row.canary_weight = None, 0
            self.generation += 1
            self._stop_replicas(old)
            for _ in range(replica_count):
                self._start_replica(
                    project, name, deployment.id, model_version, algorithm_version, deployment.user
                )
        with self.platform.session(immediate=True) as session:
            row = self._get(session, project, name)
            row.canary_model_version_id = model_version.id
            row.canary_algorithm_version_id = algorithm_version.id
            row.canary_weight = weight
            if sticky_header is not None:
                row.sticky_header = sticky_header
        self.generation += 1
        return self.get(project, name)

    def promote(self, project: str, name: str, timeout: float = 300.0) -> Deployment:
        """Make the canary production: its replicas are all ready before the old ones stop."""
        deployment = self.get(project, name)
        if deployment.canary_model_version is None:
            raise Conflict(f"deployment {name!r} has no canary to promote")
        canary = deployment.canary_model_version
        serving = [r for r in deployment.replica_rows if r.model_version_id == canary.id]
        for _ in range(deployment.replicas - len(serving)):
            self._start_replica(
                project, name, deployment.id, canary, deployment.canary_algorithm_version, deployment.user
            )
        self.wait(project, name, timeout, versions=(canary.ref,))
        old = [r for r in deployment.replica_rows if r.model_version_id == deployment.model_version_id]
        with self.platform.session(immediate=True) as session:
            row = self._get(session, project, name)
            row.model_version_id = row.canary_model_version_id
            row.algorithm_version_id = row.canary_algorithm_version_id
            row.canary_model_version_id = row.canary_algorithm_version_id = None
            row.canary_weight = 0
        self.generation += 1
        time.sleep(self.drain_seconds)  # the gateway stops routing to the old version, requests finish
        self._stop_replicas(old)
        return self.get(project, name)

    def wait(
        self, project: str, name: str, timeout: float = 300.0, versions: tuple[str, ...] | None = None
    ) -> Deployment:
        """Wait until every replica (of `versions`, if given) is ready; raise when one failed or time ran out."""
        deadline = time.monotonic() + timeout
        while True:
            deployment = self.get(project, name)
            states = [
                s
                for s in self.replica_states(deployment)
                if (versions is None and s["role"] != "retiring")
                or (versions and s["model_version"] in versions)
            ]
            if all_ready(name, states):
                return deployment
            if time.monotonic() > deadline:
                raise Unavailable(f"deployment {name!r} was not ready after {timeout:g} s")
            time.sleep(WAIT_INTERVAL)

    def delete(self, project: str, name: str) -> list[str]:
        """Stop every replica, free their reservations and forget the deployment."""
        deployment = self.get(project, name)
        self._stop_replicas(deployment.replica_rows)
        with self.platform.session(immediate=True) as session:
            row = self._get(session, project, name)
            session.execute(delete(DeploymentMetrics).where(DeploymentMetrics.deployment_id == row.id))
            session.delete(row)
        self.generation += 1
        replicas.remove(self.platform.storage.kind_dir(project, "deployments") / name)
        self.keys.forget()
        return [name]

    def reconcile(self) -> list[str]:
        """Restart the supervisors of replicas that should run but lost theirs (a reboot); return their ids.

        Checked again under the write lock, so a server and a CLI reconciling at once start one each.
        Kubernetes restarts its own pods: its replicas are left to it. The gateway process is
        started again too while a deployment exists (or always, with `gateway_always`).
        """
        with self.platform.session() as session:
            rows = list(session.scalars(select(Replica)))
            if self.gateway_always or session.scalar(select(Deployment.id).limit(1)) is not None:
                self.ensure_gateway()
        restarted = []
        for row in rows:
            if "kubernetes" in row.handle or replicas.supervised(row.handle) or not self._should_run(row):
                continue
            with self.platform.session(immediate=True) as session:
                found = session.get(Replica, row.id)
                if found is None or replicas.supervised(found.handle):
                    continue
                found.handle = replicas.spawn(self.run_dir(found))
            restarted.append(row.id)
        return restarted

    def suspend(self) -> list[str]:
        """Stop the gateway process and the running local replicas until the platform's next start.

        What `kpl-lab up` does as it stops: the deployments stay, and the next `reconcile` (the
        service's start) starts their replicas and the gateway again. Kubernetes keeps its pods.
        Return the ids of the replicas stopped.
        """
        from . import gateway_process

        gateway_process.stop(
            self.platform.home, self.grace_seconds
        )  # first: nothing routed to a stopping one
        with self.platform.session() as session:
            rows = [
                row
                for row in session.scalars(select(Replica))
                if "kubernetes" not in row.handle and replicas.supervised(row.handle)
            ]
        for row in rows:
            replicas.stop(self.run_dir(row), row.handle, self.grace_seconds, resume=True)
        return [row.id for row in rows]

    def ensure_gateway(self) -> bool:
        """Start the gateway process unless it runs (or is turned off); return whether it was started."""
        from . import gateway_process  # it imports the gateway, which imports this module

        if not self.gateway_process or self.replica_backend != "local":  # Kubernetes: the REST route
            return False
        try:
            me = (
                {"pid": os.getpid(), "start": process_start_time(os.getpid())}
                if self.gateway_always
                else None
            )
            return gateway_process.ensure(self.platform, self.gateway_port, keep_for=me)
        except (OSError, RuntimeError, subprocess.SubprocessError) as error:  # the REST route still serves
            self.log.warning("kpl_lab: the gateway process did not start: %s", error)
            return False

    def _await_gateway(self) -> None:
        """Wait while the gateway process starts (pid known, port not yet), so a new deployment comes with its URL."""
        from . import gateway_process

        deadline = time.monotonic() + GATEWAY_START_SECONDS
        while time.monotonic() < deadline:
            found = gateway_process.state(self.platform.home)
            if found is None or found.get("port"):  # none (off, failed: the REST route serves) or listening
                return
            time.sleep(WAIT_INTERVAL)

    def gateway_url(self, name: str) -> str | None:
        """Return the URL callers with an API key predict with through the gateway process (None: not running)."""
        from . import gateway_process

        running = self.gateway_process and self.replica_backend == "local"
        base = gateway_process.url(self.platform.home) if running else None
        if base and self.gateway_public_url:
            base = self.gateway_public_url.rstrip("/")
        return f"{base}{gateway_process.ROUTE_PREFIX}{name}{gateway_process.ROUTE_SUFFIX}" if base else None

    def _should_run(self, row: Replica) -> bool:
        """Say whether a replica ended on its own terms (failed, stopped) or was cut off."""
        run_dir = self.run_dir(row)
        ended = (read_own_json(run_dir / "status.json") or {}).get("state") in ("failed", "stopped")
        return not ended and (run_dir / "replica.json").is_file()

    # helpers

    def _resolve(
        self, project: str, model: str, algorithm: str | None
    ) -> tuple[ModelVersion, AlgorithmVersion]:
        """Return the model version and the algorithm version that serves it (its job's, by default)."""
        catalog = self.platform.catalog
        model_version = catalog.get_model(project, model)
        if algorithm is None:
            algorithm = (model_version.lineage or {}).get("algorithm")
            if not algorithm:
                raise BadRequest(
                    f"model {model_version.ref} was not made by a job: name the algorithm that serves it "
                    "(--algorithm)",
                    field="algorithm",
                )
        algorithm_version = catalog.get_algorithm(project, algorithm)
        spec = catalog.read_algorithm(algorithm_version).spec
        if "deploy" not in spec.functions:
            raise BadRequest(
                f"algorithm {algorithm_version.ref} has no deploy function (environment.yml `deploy`)",
                field="algorithm",
            )
        if spec.image.runs:
            raise BadRequest(
                f"algorithm {algorithm_version.ref}: deployments run on the platform's Python, "
                "image.runs is not supported for deploy yet",
                field="algorithm",
            )
        return model_version, algorithm_version

    def _start_replica(
        self,
        project: str,
        name: str,
        deployment_id: int,
        model_version: ModelVersion,
        algorithm_version: AlgorithmVersion,
        user: str,
    ) -> str:
        """Reserve, write the run folder, record the replica and start its supervisor; return its id.

        Its server runs as `user`'s account when the platform runs users' jobs as theirs.
        """
        catalog = self.platform.catalog
        algorithm = catalog.read_algorithm(algorithm_version)
        function = algorithm.spec.function("deploy")
        replica_id = f"d{deployment_id}-{secrets.token_hex(4)}"
        resources = Resources.of(function)
        if self.ledger.reserve(project, OWNER_KIND, replica_id, resources) is None:
            raise Unavailable(
                f"not enough free resources for a replica of {name!r} now "
                f"({resources.cpu:g} CPU, {resources.memory} MB): stop something or lower the replicas"
            )
        run_dir = self.platform.storage.kind_dir(project, "deployments") / name / replica_id
        if self.replica_backend == "kubernetes":
            try:
                self._scale_up(project, name, deployment_id, replica_id, model_version, algorithm_version)
            except BaseException:
                self.ledger.release(OWNER_KIND, replica_id)
                raise
            return replica_id
        try:
            who, python = self._runs_as(user, project)
            replicas.prepare(
                run_dir,
                function.cmd,
                catalog.path(algorithm_version),
                catalog.path(model_version),
                algorithm.parameters.values,
                {
                    "host": HOST,
                    "grace_seconds": self.grace_seconds,
                    "max_failures": self.max_failures,
                    "backoff_seconds": self.backoff_seconds,
                    "max_backoff_seconds": self.max_backoff_seconds,
                },
                python,
                who,
                project,
                tuple(self.platform.passed_environment),
            )
            with self.platform.session(immediate=True) as session:
                session.add(
                    Replica(
                        id=replica_id,
                        deployment_id=deployment_id,
                        model_version_id=model_version.id,
                        model_ref=model_version.ref,
                        run_dir=self.platform.storage.relative(run_dir),
                        handle={},
                    )
                )
            handle = replicas.spawn(run_dir)
            with self.platform.session(immediate=True) as session:
                session.get(Replica, replica_id).handle = handle
        except BaseException:
            self.ledger.release(OWNER_KIND, replica_id)
            raise
        return replica_id

    def _runs_as(self, user: str, project: str) -> tuple[dict | None, str]:
        """Return whom a replica's server runs as (None: the platform) and the Python it finds first.

        As the job executor runs jobs: as their users' own accounts (with no user, the project's
        sandbox account) through the privileged helper, on the users' Python (`LocalExecutor.python`),
        else as the platform on its own.
        """
        executor = self.platform.jobs.executor
        if not isinstance(executor, LocalExecutor) or not self.platform.helper:
            return None, sys.executable
        return self.platform.helper.runs_as(user, project), executor.python

    def _scale_up(
        self,
        project: str,
        name: str,
        deployment_id: int,
        replica_id: str,
        model_version: ModelVersion,
        algorithm_version: AlgorithmVersion,
    ) -> None:
        """Record one more replica of a version and apply its Kubernetes Deployment with that many replicas."""
        from .kubernetes import ServedVersion

        catalog = self.platform.catalog
        algorithm = catalog.read_algorithm(algorithm_version)
        function = algorithm.spec.function("deploy")
        run_dir = (
            self.platform.storage.kind_dir(project, "deployments")
            / name
            / model_version.ref.replace(":", "-")
        )
        with self.platform.session(immediate=True) as session:
            count = 1 + len(
                list(
                    session.scalars(
                        select(Replica.id).where(
                            Replica.deployment_id == deployment_id,
                            Replica.model_version_id == model_version.id,
                        )
                    )
                )
            )
        served = ServedVersion(
            project=project,
            deployment=name,
            model_version=model_version.ref,
            cmd=function.cmd,
            image=algorithm.spec.image.from_image,
            algorithm_dir=catalog.path(algorithm_version),
            model_dir=catalog.path(model_version),
            run_dir=run_dir,
            replicas=count,
            limits=Resources.of(function),
            parameters=algorithm.parameters.values,
        )
        _run(self.kubernetes.apply(served))
        with self.platform.session(immediate=True) as session:
            session.add(
                Replica(
                    id=replica_id,
                    deployment_id=deployment_id,
                    model_version_id=model_version.id,
                    model_ref=model_version.ref,
                    run_dir=self.platform.storage.relative(run_dir),
                    handle={"kubernetes": served.name},
                )
            )

    def _scale_down(self, rows: list[Replica]) -> None:
        """Scale the Kubernetes Deployments of these replicas down by as many; delete those left with none."""
        for name in {row.handle["kubernetes"] for row in rows}:
            going = [row for row in rows if row.handle["kubernetes"] == name]
            with self.platform.session() as session:
                deployment = session.get(Deployment, going[0].deployment_id)
                project = deployment.project.name
                left = sum(
                    1
                    for r in session.scalars(select(Replica).where(Replica.deployment_id == deployment.id))
                    if r.handle.get("kubernetes") == name
                ) - len(going)
            if left > 0:
                _run(self.kubernetes.scale(project, name, left))
            else:
                _run(self.kubernetes.delete(project, name))

    def _stop_replicas(self, rows: list[Replica]) -> None:
        """Stop replicas, free their reservations and forget them."""
        pods = [row for row in rows if "kubernetes" in row.handle]
        if pods:
            self._scale_down(pods)
        rows = [row for row in rows if "kubernetes" not in row.handle]
        for row in rows:
            replicas.stop(self.run_dir(row), row.handle, self.grace_seconds)
        with self.ledger.locked() as session:
            for row in [*pods, *rows]:
                self.ledger.release(OWNER_KIND, row.id, session)
                found = session.get(Replica, row.id)
                if found is not None:
                    session.delete(found)
        self.generation += 1
        for row in rows:
            replicas.remove(self.run_dir(row))


def _run(coroutine):
    """Run a Kubernetes API coroutine to its end, from a thread with or without an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(1) as pool:  # a loop runs here: the coroutine gets one of its own
        return pool.submit(asyncio.run, coroutine).result()


def _load(row: Deployment) -> None:
    """Load the relationships the callers read after the session closes."""
    for version in (row.model_version, row.canary_model_version):
        if version is not None:
            _ = version.model
    _ = row.algorithm_version, row.canary_algorithm_version, row.project, list(row.replica_rows)


def _role(deployment: Deployment, row: Replica) -> str:
    if row.model_version_id == deployment.model_version_id:
        return "production"
    if (
        deployment.canary_model_version_id is not None
        and row.model_version_id == deployment.canary_model_version_id
    ):
        return "canary"
    return "retiring"


def _versions(deployment: Deployment) -> list[str]:
    return [v.ref for v in (deployment.model_version, deployment.canary_model_version) if v is not None]
