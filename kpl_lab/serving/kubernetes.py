"""Deployments on Kubernetes: each served model version as a Deployment and a Service.

A deployment's production version and its canary are two `apps/v1` Deployments (each with
a ClusterIP Service) whose pods run the algorithm's `deploy` function with the model mounted
at `inputs/model`, as a job's inputs are; the gateway splits traffic between the two.
Resources, devices, storage and security come from the job executor's settings
(`KubernetesExecutor`), so a replica pod looks like a job pod that keeps running.
For clusters that run KServe, `build_inference_service_manifest` gives one
`serving.kserve.io/v1beta1` InferenceService with the canary as its traffic percent.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from kubernetes_asyncio.client import ApiClient, ApiException, AppsV1Api, CoreV1Api
from traitlets import Int
from traitlets.config import LoggingConfigurable

from ..engine.kubernetes import (
    LABEL_PREFIX,
    PROJECT_LABEL,
    KubernetesAPIError,
    KubernetesExecutor,
    dns_label,
    label_value,
)
from ..engine.launch import JobLaunch, Resources

DEPLOYMENT_LABEL = LABEL_PREFIX + "deployment"
VERSION_LABEL = LABEL_PREFIX + "model-version"
CONTAINER = "model"
PORT_NAME = "http"
KSERVE_API = "serving.kserve.io/v1beta1"


@dataclass
class ServedVersion:
    """One model version of a deployment as Kubernetes serves it."""

    project: str
    deployment: str
    model_version: str  # NAME:VERSION
    cmd: str
    image: str | None
    algorithm_dir: Path
    model_dir: Path
    run_dir: Path
    replicas: int
    limits: Resources = field(default_factory=Resources)
    parameters: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        """Return the name of this version's Deployment and Service."""
        return dns_label(f"{self.deployment}-{self.model_version}", prefix="kpl-serve-")


class KubernetesDeployments(LoggingConfigurable):
    """Build and apply the Kubernetes objects of deployments, with the job executor's settings."""

    port = Int(8080, help="Port the deploy server listens on inside its pod (KPL_DEPLOY_PORT).").tag(
        config=True
    )
    service_port = Int(80, help="Port of each version's Service.").tag(config=True)
    probe_period_seconds = Int(5, help="Seconds between two /health probes.").tag(config=True)
    liveness_failures = Int(3, help="Failed /health probes in a row after which the pod restarts.").tag(
        config=True
    )
    startup_seconds = Int(
        600, help="Seconds a replica may take to load its model before liveness probes count."
    ).tag(config=True)

    def __init__(self, executor: KubernetesExecutor, **kwargs) -> None:
        super().__init__(parent=executor, **kwargs)
        self.executor = executor

    # -- manifests -------------------------------------------------------------------------

    def labels(self, served: ServedVersion) -> dict[str, str]:
        """Return the labels of a version's objects; its Service selects its pods by them."""
        return version_labels(served.project, served.deployment, served.model_version)

    def launch(self, served: ServedVersion) -> JobLaunch:
        """Return the launch the job executor builds a replica pod from (function `deploy`)."""
        return JobLaunch(
            job_id=served.name,
            project=served.project,
            function="deploy",
            cmd=served.cmd,
            algorithm_dir=served.algorithm_dir,
            run_dir=served.run_dir,
            image=served.image,
            inputs={"model": served.model_dir},
            parameters=served.parameters,
            limits=served.limits,
            env={"KPL_ENV": "deploy", "KPL_DEPLOY_PORT": str(self.port)},
        )

    def _probe(self, failures: int) -> dict:
        return {
            "httpGet": {"path": "/health", "port": PORT_NAME},
            "periodSeconds": self.probe_period_seconds,
            "timeoutSeconds": 2,
            "failureThreshold": failures,
        }

    def build_pod_template(self, served: ServedVersion) -> dict:
        """Return the pod template of a version's replicas: a job pod that serves on `port` with /health probes."""
        template = self.executor._pod_template(self.launch(served), CONTAINER, [])
        labels = self.labels(served)
        template["metadata"] = {
            "labels": labels,
            "annotations": {DEPLOYMENT_LABEL: served.deployment, VERSION_LABEL: served.model_version},
        }
        spec = template["spec"]
        spec["restartPolicy"] = "Always"  # the only policy a Deployment accepts
        container = spec["containers"][0]
        container["ports"] = [{"name": PORT_NAME, "containerPort": self.port, "protocol": "TCP"}]
        container["readinessProbe"] = self._probe(1)
        container["livenessProbe"] = self._probe(self.liveness_failures)
        # liveness waits until the model is loaded, however long that takes
        container["startupProbe"] = {
            **self._probe(1),
            "failureThreshold": max(1, self.startup_seconds // self.probe_period_seconds),
        }
        return template

    def build_deployment_manifest(self, served: ServedVersion) -> dict:
        """Return the `apps/v1` Deployment of one served version (pure: no API call)."""
        labels = self.labels(served)
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": served.name,
                "namespace": self.executor.namespace_for(served.project),
                "labels": labels,
            },
            "spec": {
                "replicas": served.replicas,
                "selector": {"matchLabels": labels},
                # a new pod is ready before an old one goes: no request is dropped
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                "template": self.build_pod_template(served),
            },
        }

    def build_service_manifest(self, served: ServedVersion) -> dict:
        """Return the ClusterIP Service the gateway reaches one served version's ready pods through."""
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": served.name,
                "namespace": self.executor.namespace_for(served.project),
                "labels": self.labels(served),
            },
            "spec": {
                "type": "ClusterIP",
                "selector": self.labels(served),
                "ports": [
                    {"name": PORT_NAME, "port": self.service_port, "targetPort": PORT_NAME, "protocol": "TCP"}
                ],
            },
        }

    def build_inference_service_manifest(
        self, production: ServedVersion, canary: ServedVersion | None = None, canary_weight: int = 0
    ) -> dict:
        """Return a KServe InferenceService serving the latest version, `canary_weight` percent of it the canary.

        KServe rolls a canary by updating the predictor and keeping the previous revision for the
        rest of the traffic, so the predictor is the canary's when there is one.
        """
        latest = canary or production
        pod = self.build_pod_template(latest)["spec"]
        container = copy.deepcopy(pod["containers"][0])
        container["name"] = "kserve-container"  # the name KServe's custom predictors use
        predictor: dict = {
            "minReplicas": latest.replicas,
            "containers": [container],
            "volumes": pod["volumes"],
            "securityContext": pod["securityContext"],
        }
        for key in ("serviceAccountName", "imagePullSecrets", "nodeSelector", "tolerations"):
            if key in pod:
                predictor[key] = pod[key]
        if canary is not None:
            predictor["canaryTrafficPercent"] = canary_weight
        return {
            "apiVersion": KSERVE_API,
            "kind": "InferenceService",
            "metadata": {
                "name": dns_label(production.deployment, prefix="kpl-"),
                "namespace": self.executor.namespace_for(production.project),
                "labels": {k: v for k, v in self.labels(latest).items() if k != VERSION_LABEL},
                "annotations": {VERSION_LABEL: latest.model_version},
            },
            "spec": {"predictor": predictor},
        }

    # -- API -------------------------------------------------------------------------------

    @asynccontextmanager
    async def _api(self, doing: str) -> AsyncIterator[tuple[ApiClient, AppsV1Api, CoreV1Api]]:
        configuration = await self.executor._load_configuration()
        async with ApiClient(configuration) as api:
            try:
                yield api, AppsV1Api(api), CoreV1Api(api)
            except aiohttp.ClientError as exc:
                raise KubernetesAPIError(
                    f"cannot reach the Kubernetes API at {configuration.host} while {doing}: {exc}"
                ) from exc

    async def apply(self, served: ServedVersion) -> dict:
        """Create a version's Deployment and Service, or patch the Deployment that exists; return it."""
        await self.executor.before_start(self.launch(served))  # run folder and parameter.yml
        deployment, service = self.build_deployment_manifest(served), self.build_service_manifest(served)
        namespace = deployment["metadata"]["namespace"]
        async with self._api(f"applying deployment {served.name}") as (api, apps, core):
            try:
                created = await apps.create_namespaced_deployment(namespace, deployment)
            except ApiException as exc:
                if exc.status != 409:
                    raise self.executor._refused(
                        exc, namespace, f"creating Deployment {served.name}"
                    ) from exc
                created = await apps.patch_namespaced_deployment(
                    served.name, namespace, {"spec": deployment["spec"]}
                )
            try:
                await core.create_namespaced_service(namespace, service)
            except ApiException as exc:
                if exc.status != 409:  # an existing Service selects the same pods: keep it
                    raise self.executor._refused(exc, namespace, f"creating Service {served.name}") from exc
            return api.sanitize_for_serialization(created)

    async def scale(self, project: str, name: str, replicas: int) -> dict:
        """Set the replicas of a served version's Deployment; return it."""
        namespace = self.executor.namespace_for(project)
        async with self._api(f"scaling deployment {name}") as (api, apps, _):
            try:
                found = await apps.patch_namespaced_deployment(
                    name, namespace, {"spec": {"replicas": replicas}}
                )
            except ApiException as exc:
                raise self.executor._refused(exc, namespace, f"scaling Deployment {name}") from exc
            return api.sanitize_for_serialization(found)

    async def status(self, project: str, name: str) -> dict:
        """Return a served version's state: starting, ready, degraded, failed or stopped, with replica counts and why."""
        namespace = self.executor.namespace_for(project)
        async with self._api(f"reading deployment {name}") as (api, apps, _):
            try:
                found = api.sanitize_for_serialization(await apps.read_namespaced_deployment(name, namespace))
            except ApiException as exc:
                if exc.status == 404:
                    return {"state": "stopped", "ready": 0, "replicas": 0, "reason": "no Deployment"}
                raise self.executor._refused(exc, namespace, f"reading Deployment {name}") from exc
        return deployment_state(found)

    async def logs(
        self, project: str, deployment: str, model_version: str, lines: int
    ) -> list[tuple[str, str]]:
        """Return each pod of a served version (its labels select them), oldest first, with its last `lines` lines."""
        namespace = self.executor.namespace_for(project)
        selected = version_labels(project, deployment, model_version)
        async with self._api(f"reading the logs of deployment {deployment}") as (api, _, core):
            try:
                listed = await core.list_namespaced_pod(
                    namespace, label_selector=",".join(f"{key}={value}" for key, value in selected.items())
                )
            except ApiException as exc:
                raise self.executor._refused(
                    exc, namespace, f"listing the pods of deployment {deployment}"
                ) from exc
            pods = sorted(
                api.sanitize_for_serialization(listed)["items"],
                key=lambda pod: (pod["metadata"].get("creationTimestamp") or "", pod["metadata"]["name"]),
            )
            return [
                (
                    pod["metadata"]["name"],
                    await self.executor._pod_log(core, namespace, pod, CONTAINER, lines),
                )
                for pod in pods
            ]

    async def delete(self, project: str, name: str) -> None:
        """Delete a served version's Deployment (its pods go with it) and Service; missing ones are fine."""
        namespace = self.executor.namespace_for(project)
        async with self._api(f"deleting deployment {name}") as (_, apps, core):
            for remove in (apps.delete_namespaced_deployment, core.delete_namespaced_service):
                try:
                    await remove(name, namespace, propagation_policy="Foreground")
                except ApiException as exc:
                    if exc.status != 404:
                        raise self.executor._refused(exc, namespace, f"deleting {name}") from exc

    def url(self, project: str, name: str) -> str:
        """Return the in-cluster URL of a served version's Service."""
        return f"http://{name}.{self.executor.namespace_for(project)}.svc:{self.service_port}"


def version_labels(project: str, deployment: str, model_version: str) -> dict[str, str]:
    """Return the labels of one served version's Deployment, Service and pods."""
    return {
        "app.kubernetes.io/managed-by": "kpl-lab",
        "app.kubernetes.io/component": "deployment",
        PROJECT_LABEL: label_value(project),
        DEPLOYMENT_LABEL: label_value(deployment),
        VERSION_LABEL: label_value(model_version),
    }


def deployment_state(found: dict) -> dict:
    """Return the state of an `apps/v1` Deployment as read from the API."""
    wanted = found["spec"].get("replicas", 1)
    status = found.get("status") or {}
    ready = status.get("readyReplicas", 0)
    conditions = {c["type"]: c for c in status.get("conditions", [])}
    counts = {"ready": ready, "replicas": wanted}
    progressing = conditions.get("Progressing", {})
    if progressing.get("status") == "False":  # e.g. ProgressDeadlineExceeded: pods never became ready
        return {
            "state": "failed",
            **counts,
            "reason": progressing.get("message", progressing.get("reason", "")),
        }
    if ready >= wanted and status.get("observedGeneration", 0) >= found["metadata"].get("generation", 1):
        return {"state": "ready", **counts, "reason": ""}
    reason = f"{ready} of {wanted} replicas ready"
    available = conditions.get("Available", {})
    if available.get("status") == "False" and available.get("message"):
        reason += f": {available['message']}"
    return {"state": "degraded" if ready else "starting", **counts, "reason": reason}
