"""Run jobs as Kubernetes Jobs in the algorithm's `from_image` container.

A job of several workers runs as a Kubeflow `PyTorchJob` (a Master and N-1 Workers) when
the cluster serves the Training Operator's API group, else as an indexed Job (one pod a
worker, completion index = rank) with a headless Service giving worker 0 a stable name.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import re
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path, PurePosixPath
from urllib.parse import quote

import aiohttp
import yaml
from kubernetes_asyncio import config
from kubernetes_asyncio.client import (
    ApiClient,
    ApiException,
    BatchV1Api,
    Configuration,
    CoreV1Api,
    CustomObjectsApi,
)
from traitlets import Bool, Dict, Enum, Int, List, Unicode

from kpl_lab.errors import BadRequest, Forbidden, KPLError

from .executor import ExecutionState, Executor
from .launch import JobLaunch
from .runfolder import Refused, worker_log, write_atomic
from .supervisor import last_line

MOUNT_ROOT = PurePosixPath("/kpl")
ALGORITHM_PATH = MOUNT_ROOT / "algorithm"
RUN_PATH = MOUNT_ROOT / "run"
INPUT_ROOT = MOUNT_ROOT / "inputs"
OUTPUT_ROOT = MOUNT_ROOT / "outputs"
STORAGE_VOLUME = "kpl-storage"
SHM_VOLUME = "dshm"
CONTAINER = "job"
LABEL_PREFIX = "kpl-lab.io/"
JOB_ID_LABEL = LABEL_PREFIX + "job-id"
PROJECT_LABEL = LABEL_PREFIX + "project"
TOKEN_KEY = "token"
# The Kubeflow Training Operator's API, and the container name it looks for.
TRAINING_GROUP = "kubeflow.org"
TRAINING_VERSION = "v1"
PYTORCHJOBS = "pytorchjobs"
PYTORCH_CONTAINER = "pytorch"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
REPLICA_TYPE = "training.kubeflow.org/replica-type"
REPLICA_INDEX = "training.kubeflow.org/replica-index"
# Waiting reasons after which the pod will not start without a person fixing something.
FATAL_WAITING = {"ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull"}

_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_QUOTA = re.compile(r"exceeded quota: ([^,]+), requested: (.*), used: (.*), limited: (.*)$")
_KEY = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


class KubernetesQuotaError(Forbidden):
    """A Kubernetes ResourceQuota refused the job."""


class KubernetesAPIError(KPLError):
    """The Kubernetes API could not be reached or refused a request."""

    status = 502


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def dns_label(text: str, prefix: str = "") -> str:
    """Return `prefix + text` as an RFC 1123 label (63 chars), hashed when it had to change."""
    wanted = prefix + text
    safe = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", wanted.lower())).strip("-")
    if safe == wanted and len(safe) <= 63:
        return safe
    # A suffix from the original keeps two ids that sanitize alike apart.
    return f"{safe[:54].rstrip('-')}-{_short_hash(wanted)}".lstrip("-")


def label_value(text: str) -> str:
    """Return `text` as a valid label value, hashed when it had to change."""
    if _LABEL_VALUE.match(text):
        return text
    safe = re.sub(r"[^A-Za-z0-9._-]", "-", text).strip("-._")
    return f"{safe[:54].rstrip('-._')}-{_short_hash(text)}".lstrip("-")


def job_name(job_id: str) -> str:
    """Return the Kubernetes Job name of a job."""
    return dns_label(job_id, prefix="kpl-job-")


def secret_name(job_id: str) -> str:
    """Return the name of the Secret holding the job's events token."""
    return job_name(job_id) + "-token"


def quota_message(namespace: str, message: str) -> str:
    """Turn the API server's quota refusal into a sentence a person can act on."""
    match = _QUOTA.search(message)
    if not match:
        return f"refused by a Kubernetes resource quota in namespace {namespace}: {message}"
    name, requested, used, limited = (part.strip() for part in match.groups())

    def pairs(text: str) -> dict[str, str]:
        return dict(item.split("=", 1) for item in text.split(",") if "=" in item)

    used_by, limit_by = pairs(used), pairs(limited)
    parts = [
        f"{key}: asks {value}, {used_by.get(key, '?')} of {limit_by.get(key, '?')} already used"
        for key, value in pairs(requested).items()
    ]
    return f"Kubernetes quota '{name}' in namespace {namespace} is full ({'; '.join(parts)})"


def _api_message(exc: ApiException) -> str:
    try:
        return json.loads(exc.body).get("message") or str(exc.reason)
    except (TypeError, ValueError, AttributeError):
        return str(exc.body or exc.reason)


def _relative(root: Path, path: Path, what: str) -> str:
    rel = os.path.relpath(os.path.normpath(path), os.path.normpath(root))
    if rel == ".." or rel.startswith("../") or os.path.isabs(rel):
        raise BadRequest(
            f"{what} is at {path}, outside the storage the pods mount "
            f"(KubernetesExecutor.storage_root = {root})",
            field=what,
        )
    return "" if rel == "." else rel


class KubernetesExecutor(Executor):
    """Run each job as a `batch/v1` Job; files through the shared storage PVC."""

    uses_images = True

    namespace = Unicode(
        "kpl-{project}", config=True, help="Namespace of a job's Kubernetes objects; {project} is replaced."
    )
    kubeconfig = Unicode(
        "", config=True, help="kubeconfig file; empty: in-cluster config inside a pod, else $KUBECONFIG."
    )
    kube_context = Unicode("", config=True, help="kubeconfig context; empty: the current one.")
    service_account = Unicode("", config=True, help="Service account of job pods; empty: the default.")
    automount_service_account_token = Bool(
        False, config=True, help="Mount an API token in job pods (jobs do not need the API)."
    )
    image_pull_secrets = List(Unicode(), config=True, help="Names of Secrets used to pull images.")
    default_image = Unicode(
        "", config=True, help="Image for algorithms whose environment.yml has no image.from_image."
    )
    runs_in_pod = Bool(
        False,
        config=True,
        help="Run environment.yml image.runs in the pod before cmd; default: they are baked into the image.",
    )
    shell = List(Unicode(), default_value=["/bin/sh", "-c"], config=True, help="Shell that runs cmd.")
    storage_pvc = Unicode(
        "kpl-storage", config=True, help="PersistentVolumeClaim holding the platform storage."
    )
    storage_root = Unicode(
        "", config=True, help="Where the platform sees that storage; every job path must be under it."
    )
    events_url = Unicode(
        "",
        config=True,
        help="URL jobs POST events to ({job_id} and {project} replaced); empty: events.jsonl on the PVC.",
    )
    device_resources = Dict(
        default_value={"gpu": "nvidia.com/gpu", "npu": "huawei.com/Ascend910"},
        config=True,
        help="Extended resource name of each device kind.",
    )
    device_node_selectors = Dict(
        default_value={}, config=True, help="Node selector added when a job asks for a device kind."
    )
    device_tolerations = Dict(
        default_value={}, config=True, help="Tolerations added when a job asks for a device kind."
    )
    node_selector = Dict(default_value={}, config=True, help="Node selector of every job pod.")
    run_as_user = Int(1000, allow_none=True, config=True, help="UID of job containers; None: the image's.")
    run_as_group = Int(1000, allow_none=True, config=True, help="GID of job containers; None: the image's.")
    fs_group = Int(1000, allow_none=True, config=True, help="Supplementary group owning mounted volumes.")
    run_as_non_root = Bool(True, config=True, help="Refuse to start images that would run as root.")
    ttl_seconds_after_finished = Int(
        3600, config=True, help="Seconds a finished Job stays before Kubernetes deletes it."
    )
    backoff_limit = Int(0, config=True, help="Pod retries; 0: a failed pod fails the job.")
    termination_grace_seconds = Int(30, config=True, help="Grace period of job pods on deletion.")
    log_limit_bytes = Int(
        10 * 1024 * 1024, config=True, help="Most bytes of pod log copied to output.log at the end."
    )
    distributed = Enum(
        ["auto", "pytorchjob", "indexed-job"],
        default_value="auto",
        config=True,
        help="How a job of several workers runs: a Kubeflow PyTorchJob, an indexed Job with a headless "
        "Service, or auto: a PyTorchJob when the cluster serves kubeflow.org/v1 pytorchjobs.",
    )
    master_port = Int(29500, config=True, help="Port worker 0 listens on for the others (torch.distributed).")

    _configuration: Configuration | None = None
    _training_operator: bool | None = None  # whether the cluster serves PyTorchJobs, asked once

    # -- manifests -------------------------------------------------------------------------

    def namespace_for(self, project: str) -> str:
        """Return the namespace of a project's jobs."""
        name = self.namespace.format(project=dns_label(project))
        if not _DNS_LABEL.match(name):
            raise BadRequest(
                f"namespace {name!r} made from KubernetesExecutor.namespace={self.namespace!r} "
                "is not a valid Kubernetes namespace",
                field="namespace",
            )
        return name

    def labels(self, launch: JobLaunch) -> dict[str, str]:
        """Return the labels on every object of a job; attach finds the Job by them."""
        return {
            "app.kubernetes.io/managed-by": "kpl-lab",
            "app.kubernetes.io/component": "job",
            JOB_ID_LABEL: label_value(launch.job_id),
            PROJECT_LABEL: label_value(launch.project),
        }

    def _storage_root(self) -> Path:
        if not self.storage_root:
            raise BadRequest(
                "KubernetesExecutor.storage_root is not set: say where the platform mounts "
                f"the storage PVC {self.storage_pvc!r}",
                field="storage_root",
            )
        return Path(self.storage_root)

    def _mount(self, mount_path: PurePosixPath, rel: str, read_only: bool) -> dict:
        mount = {"name": STORAGE_VOLUME, "mountPath": str(mount_path), "readOnly": read_only}
        if rel:
            mount["subPath"] = rel
        return mount

    def _env(self, launch: JobLaunch) -> list[dict]:
        env = {
            "KPL_INNER": "1",
            "KPL_ENV": "job",
            "KPL_ENV_TASK_ID": launch.job_id,
            "KPL_ENV_FUNCTION": launch.function,
            "KPL_ENV_INPUT_ROOT_PATH": str(INPUT_ROOT),
            "KPL_ENV_OUTPUT_ROOT_PATH": str(OUTPUT_ROOT),
            "KPL_ENV_PARAMETER": json.dumps(launch.parameters, sort_keys=True),
            "KPL_PARAMETER_FILE": str(RUN_PATH / "parameter.yml"),
            "KPL_RUN_DIR": str(RUN_PATH),
        }
        if self.events_url:
            try:
                env["KPL_EVENTS_URL"] = self.events_url.format(
                    job_id=quote(launch.job_id, safe=""), project=quote(launch.project, safe="")
                )
            except (KeyError, IndexError) as exc:
                raise BadRequest(
                    f"KubernetesExecutor.events_url={self.events_url!r} may only use {{job_id}} and {{project}}",
                    field="events_url",
                ) from exc
        else:
            env["KPL_EVENTS_FILE"] = str(RUN_PATH / "events.jsonl")
        # A kind with no devices is hidden; a kind with devices is left to its device plugin.
        for kind, variable in (("gpu", "CUDA_VISIBLE_DEVICES"), ("npu", "ASCEND_RT_VISIBLE_DEVICES")):
            if not launch.limits.devices.get(kind):
                env[variable] = ""
        env.update({k: v for k, v in launch.env.items() if k != "KPL_JOB_TOKEN"})
        items = [{"name": k, "value": str(v)} for k, v in env.items()]
        if self.events_url:
            items.append(
                {
                    "name": "KPL_JOB_TOKEN",
                    "valueFrom": {"secretKeyRef": {"name": secret_name(launch.job_id), "key": TOKEN_KEY}},
                }
            )
        return items

    def _resources(self, launch: JobLaunch) -> tuple[dict, list[str]]:
        limits = launch.limits
        requests = launch.requests or launch.limits
        for which, res in (("limits", limits), ("requests", requests)):
            if res.cpu <= 0 or res.memory <= 0 or res.shm < 0:
                raise BadRequest(
                    f"job {launch.job_id}: {which} need cpu > 0 and memory > 0 MB, shm >= 0 "
                    f"(got cpu={res.cpu}, memory={res.memory}, shm={res.shm})",
                    field=which,
                )
        spec = {
            "limits": {"cpu": f"{round(limits.cpu * 1000)}m", "memory": f"{limits.memory}Mi"},
            "requests": {"cpu": f"{round(requests.cpu * 1000)}m", "memory": f"{requests.memory}Mi"},
        }
        kinds = []
        for kind, count in sorted(limits.devices.items()):
            if not count:
                continue
            if kind not in self.device_resources:
                raise BadRequest(
                    f"job {launch.job_id} asks for {count} {kind}, but KubernetesExecutor.device_resources "
                    f"names no resource for {kind!r} (known: {', '.join(sorted(self.device_resources))})",
                    field="devices",
                )
            # Extended resources cannot be overcommitted: requests must equal limits.
            spec["limits"][self.device_resources[kind]] = str(count)
            spec["requests"][self.device_resources[kind]] = str(count)
            kinds.append(kind)
        return spec, kinds

    def _script(self, launch: JobLaunch) -> str:
        if self.runs_in_pod and launch.runs:
            return "set -e\n" + "\n".join(launch.runs) + "\n" + launch.cmd
        return launch.cmd

    def _pod_template(self, launch: JobLaunch, container_name: str, env: list[dict]) -> dict:
        """Return the pod template of the job's pods, with `env` added to the job's variables."""
        image = launch.image or self.default_image
        if not image:
            raise BadRequest(
                f"job {launch.job_id}: the algorithm's environment.yml has no image.from_image "
                "and KubernetesExecutor.default_image is not set",
                field="image",
            )
        root = self._storage_root()
        mounts = [
            self._mount(ALGORITHM_PATH, _relative(root, launch.algorithm_dir, "algorithm_dir"), True),
            self._mount(RUN_PATH, _relative(root, launch.run_dir, "run_dir"), False),
        ]
        for key, path in sorted(launch.inputs.items()):
            if not _KEY.match(key):
                raise BadRequest(f"job {launch.job_id}: input key {key!r} is not a plain name", field=key)
            mounts.append(self._mount(INPUT_ROOT / key, _relative(root, path, f"input {key!r}"), True))
        for key in launch.outputs:
            if not _KEY.match(key):
                raise BadRequest(f"job {launch.job_id}: output key {key!r} is not a plain name", field=key)
            rel = _relative(root, launch.run_dir / "outputs" / key, f"output {key!r}")
            mounts.append(self._mount(OUTPUT_ROOT / key, rel, False))
        volumes = [{"name": STORAGE_VOLUME, "persistentVolumeClaim": {"claimName": self.storage_pvc}}]
        if launch.limits.shm > 0:
            # Memory-backed: counts against the container's memory limit.
            volumes.append(
                {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": f"{launch.limits.shm}Mi"}}
            )
            mounts.append({"name": SHM_VOLUME, "mountPath": "/dev/shm"})

        resources, kinds = self._resources(launch)
        node_selector = dict(self.node_selector)
        tolerations: list[dict] = []
        for kind in kinds:
            node_selector.update(self.device_node_selectors.get(kind, {}))
            tolerations.extend(self.device_tolerations.get(kind, []))

        container = {
            "name": container_name,
            "image": image,
            "command": [*self.shell, self._script(launch)],
            "workingDir": str(ALGORITHM_PATH),
            "env": self._env(launch) + env,
            "resources": resources,
            "volumeMounts": mounts,
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        }
        pod_security: dict = {"seccompProfile": {"type": "RuntimeDefault"}}
        if self.run_as_non_root:
            pod_security["runAsNonRoot"] = True
        for key, value in (
            ("runAsUser", self.run_as_user),
            ("runAsGroup", self.run_as_group),
            ("fsGroup", self.fs_group),
        ):
            if value is not None:
                pod_security[key] = value
        pod_spec: dict = {
            "restartPolicy": "Never",
            # The pause container is PID 1, so SIGTERM on deletion reaches cmd.
            "shareProcessNamespace": True,
            "enableServiceLinks": False,
            "automountServiceAccountToken": self.automount_service_account_token,
            "terminationGracePeriodSeconds": self.termination_grace_seconds,
            "securityContext": pod_security,
            "containers": [container],
            "volumes": volumes,
        }
        if self.service_account:
            pod_spec["serviceAccountName"] = self.service_account
        if self.image_pull_secrets:
            pod_spec["imagePullSecrets"] = [{"name": name} for name in self.image_pull_secrets]
        if node_selector:
            pod_spec["nodeSelector"] = node_selector
        if tolerations:
            pod_spec["tolerations"] = tolerations

        return {"metadata": self._metadata(launch), "spec": pod_spec}

    def _metadata(self, launch: JobLaunch) -> dict:
        annotations = {JOB_ID_LABEL: launch.job_id, PROJECT_LABEL: launch.project}
        if launch.runs and not self.runs_in_pod:
            annotations[LABEL_PREFIX + "runs"] = "expected in the image"
        return {"labels": self.labels(launch), "annotations": annotations}

    def _object_metadata(self, launch: JobLaunch) -> dict:
        return {
            "name": job_name(launch.job_id),
            "namespace": self.namespace_for(launch.project),
            **self._metadata(launch),
        }

    def build_job_manifest(self, launch: JobLaunch) -> dict:
        """Return the `batch/v1` Job that runs `launch` (pure: no API call, no file touched).

        A job of several workers is an indexed Job: one pod a worker, the completion index
        its RANK, worker 0 reached at `<job>-0.<service>` (`build_service_manifest`).
        """
        workers = launch.limits.workers
        name = job_name(launch.job_id)
        env = []
        if workers > 1:
            env = [
                {"name": "MASTER_ADDR", "value": f"{name}-0.{name}"},
                {"name": "MASTER_PORT", "value": str(self.master_port)},
                {"name": "WORLD_SIZE", "value": str(workers)},
                {
                    "name": "RANK",
                    "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}},
                },
                {"name": "LOCAL_RANK", "value": "0"},  # one worker a pod
                {"name": "LOCAL_WORLD_SIZE", "value": "1"},
            ]
        template = self._pod_template(launch, CONTAINER, env)
        spec: dict = {
            "backoffLimit": self.backoff_limit,
            "ttlSecondsAfterFinished": self.ttl_seconds_after_finished,
            "template": template,
        }
        if workers > 1:
            # with backoffLimit 0 the first failed worker fails the Job, which ends the others
            spec.update(completionMode="Indexed", completions=workers, parallelism=workers)
            template["spec"]["subdomain"] = name  # the headless Service: stable pod hostnames
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": self._object_metadata(launch),
            "spec": spec,
        }

    def build_service_manifest(self, launch: JobLaunch) -> dict:
        """Return the headless Service that names the pods of an indexed Job (`<job>-<index>.<job>`)."""
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": job_name(launch.job_id),
                "namespace": self.namespace_for(launch.project),
                "labels": self.labels(launch),
            },
            "spec": {
                "clusterIP": "None",
                "selector": {JOB_ID_LABEL: label_value(launch.job_id)},
                "publishNotReadyAddresses": True,  # workers look worker 0 up before it is ready
                "ports": [{"name": "rendezvous", "port": self.master_port, "targetPort": self.master_port}],
            },
        }

    def build_pytorchjob_manifest(self, launch: JobLaunch) -> dict:
        """Return the Kubeflow `PyTorchJob` of a job of several workers: a Master and N-1 Workers.

        The Training Operator sets MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE in each pod.
        """
        env = [{"name": "LOCAL_RANK", "value": "0"}, {"name": "LOCAL_WORLD_SIZE", "value": "1"}]
        template = self._pod_template(launch, PYTORCH_CONTAINER, env)
        template["spec"]["containers"][0]["ports"] = [
            {"name": "pytorchjob-port", "containerPort": self.master_port}
        ]

        def replicas(count: int) -> dict:
            return {"replicas": count, "restartPolicy": "Never", "template": json.loads(json.dumps(template))}

        return {
            "apiVersion": f"{TRAINING_GROUP}/{TRAINING_VERSION}",
            "kind": "PyTorchJob",
            "metadata": self._object_metadata(launch),
            "spec": {
                "runPolicy": {
                    "backoffLimit": self.backoff_limit,
                    "ttlSecondsAfterFinished": self.ttl_seconds_after_finished,
                    "cleanPodPolicy": "Running",  # a failed worker ends the job: the others are deleted
                },
                "pytorchReplicaSpecs": {
                    "Master": replicas(1),
                    "Worker": replicas(launch.limits.workers - 1),
                },
            },
        }

    def build_secret_manifest(self, launch: JobLaunch, token: str) -> dict:
        """Return the Secret holding the token the job sends events with."""
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {
                "name": secret_name(launch.job_id),
                "namespace": self.namespace_for(launch.project),
                "labels": self.labels(launch),
            },
            "stringData": {TOKEN_KEY: token},
        }

    # -- API -------------------------------------------------------------------------------

    async def _load_configuration(self) -> Configuration:
        if self._configuration is None:
            configuration = Configuration()
            if not self.kubeconfig and os.environ.get("KUBERNETES_SERVICE_HOST"):
                config.load_incluster_config(client_configuration=configuration)
            else:
                await config.load_kube_config(
                    config_file=self.kubeconfig or None,
                    context=self.kube_context or None,
                    client_configuration=configuration,
                    persist_config=False,
                )
            self._configuration = configuration
        return self._configuration

    @asynccontextmanager
    async def _api(self, doing: str) -> AsyncIterator[tuple[ApiClient, BatchV1Api, CoreV1Api]]:
        # One client a call: nothing stays open between polls, so nothing leaks.
        configuration = await self._load_configuration()
        async with ApiClient(configuration) as api:
            try:
                yield api, BatchV1Api(api), CoreV1Api(api)
            except aiohttp.ClientError as exc:
                raise KubernetesAPIError(
                    f"cannot reach the Kubernetes API at {configuration.host} while {doing}: {exc}"
                ) from exc

    def _refused(self, exc: ApiException, namespace: str, doing: str) -> KPLError:
        message = _api_message(exc)
        if exc.status == 403 and "exceeded quota" in message:
            return KubernetesQuotaError(quota_message(namespace, message))
        if exc.status == 403:
            return Forbidden(
                f"Kubernetes refused {doing} in namespace {namespace}: {message} "
                "(give the platform's service account the Role in docs/kubernetes.md)"
            )
        return KubernetesAPIError(f"Kubernetes refused {doing} in namespace {namespace}: {message}")

    # -- lifecycle -------------------------------------------------------------------------

    async def before_start(self, launch: JobLaunch) -> None:
        """Create the run folder and output folders on the shared storage, owned by the job's user."""
        folders = [launch.run_dir, *(launch.run_dir / "outputs" / key for key in launch.outputs)]
        for folder in folders:
            folder.mkdir(parents=True, exist_ok=True)
        write_atomic(
            launch.run_dir / "parameter.yml", yaml.safe_dump(launch.parameters, sort_keys=True), mode=0o600
        )
        write_atomic(
            launch.run_dir / "job.json", json.dumps(launch.to_json(), indent=2, sort_keys=True), mode=0o600
        )
        if os.geteuid() == 0 and self.run_as_user is not None:
            # Kubelet does not chown subPaths on most PVCs: the job's user must own what it writes.
            group = self.fs_group if self.fs_group is not None else -1
            for path in [*folders, launch.run_dir / "parameter.yml", launch.run_dir / "job.json"]:
                os.chown(path, self.run_as_user, group)

    async def _uses_pytorchjob(self, api: ApiClient, namespace: str) -> bool:
        """Return whether a job of several workers is a PyTorchJob (the cluster serves them)."""
        if self.distributed != "auto":
            return self.distributed == "pytorchjob"
        if self._training_operator is None:
            try:
                found = await CustomObjectsApi(api).get_api_resources(TRAINING_GROUP, TRAINING_VERSION)
                self._training_operator = any(r.name == PYTORCHJOBS for r in found.resources or [])
            except ApiException as exc:
                if exc.status != 404:
                    raise self._refused(exc, namespace, "looking for the Kubeflow Training Operator") from exc
                self._training_operator = False
        return self._training_operator

    async def _create(self, api: ApiClient, manifest: dict) -> dict:
        namespace = manifest["metadata"]["namespace"]
        if manifest["kind"] == "PyTorchJob":
            return await CustomObjectsApi(api).create_namespaced_custom_object(
                TRAINING_GROUP, TRAINING_VERSION, namespace, PYTORCHJOBS, manifest
            )
        return api.sanitize_for_serialization(
            await BatchV1Api(api).create_namespaced_job(namespace, manifest)
        )

    async def _read(self, api: ApiClient, kind: str, name: str, namespace: str) -> dict:
        if kind == "PyTorchJob":
            return await CustomObjectsApi(api).get_namespaced_custom_object(
                TRAINING_GROUP, TRAINING_VERSION, namespace, PYTORCHJOBS, name
            )
        return api.sanitize_for_serialization(await BatchV1Api(api).read_namespaced_job(name, namespace))

    async def _list(self, api: ApiClient, kind: str, namespace: str, selector: str) -> list[dict]:
        if kind == "PyTorchJob":
            found = await CustomObjectsApi(api).list_namespaced_custom_object(
                TRAINING_GROUP, TRAINING_VERSION, namespace, PYTORCHJOBS, label_selector=selector
            )
        else:
            found = api.sanitize_for_serialization(
                await BatchV1Api(api).list_namespaced_job(namespace, label_selector=selector)
            )
        return found.get("items", [])

    async def _delete(self, api: ApiClient, kind: str, name: str, namespace: str, grace: int) -> None:
        options = {"propagation_policy": "Foreground", "grace_period_seconds": grace}
        if kind == "PyTorchJob":
            await CustomObjectsApi(api).delete_namespaced_custom_object(
                TRAINING_GROUP, TRAINING_VERSION, namespace, PYTORCHJOBS, name, **options
            )
        else:
            await BatchV1Api(api).delete_namespaced_job(name, namespace, **options)

    async def execute(self, launch: JobLaunch) -> dict:
        """Create the token Secret and the Job or PyTorchJob (an existing one of this job is attached to)."""
        manifest = self.build_job_manifest(launch)
        namespace = manifest["metadata"]["namespace"]
        name = manifest["metadata"]["name"]
        token = launch.env.get("KPL_JOB_TOKEN") or secrets.token_urlsafe(32)
        handle = {"namespace": namespace, "name": name, "uid": None, "secret": None, "token_sha256": None}
        async with self._api(f"starting job {launch.job_id}") as (api, _, core):
            if launch.limits.workers > 1:
                if await self._uses_pytorchjob(api, namespace):
                    manifest = self.build_pytorchjob_manifest(launch)
                handle.update(kind=manifest["kind"], workers=launch.limits.workers)
            kind = manifest["kind"]
            secret_created = False
            if self.events_url:
                handle["secret"] = secret_name(launch.job_id)
                try:
                    await core.create_namespaced_secret(namespace, self.build_secret_manifest(launch, token))
                    secret_created = True
                except ApiException as exc:
                    if exc.status != 409:
                        raise self._refused(exc, namespace, f"creating Secret {handle['secret']}") from exc
                    token = await self._read_token(core, namespace, handle["secret"])
                handle["token_sha256"] = hashlib.sha256(token.encode()).hexdigest()
            try:
                job = await self._create(api, manifest)
            except ApiException as exc:
                if exc.status != 409:
                    if secret_created:
                        await _delete_quietly(core.delete_namespaced_secret(handle["secret"], namespace))
                    raise self._refused(exc, namespace, f"creating {kind} {name}") from exc
                job = await self._read(api, kind, name, namespace)
                if (job["metadata"].get("labels") or {}).get(JOB_ID_LABEL) != label_value(launch.job_id):
                    raise KubernetesAPIError(
                        f"a {kind} named {name} that is not job {launch.job_id} already exists in "
                        f"namespace {namespace}; delete it or use another namespace"
                    ) from exc
                self.log.info("%s %s/%s already exists: attaching to it", kind, namespace, name)
            handle["uid"] = job["metadata"]["uid"]
            # the Secret and the Service go when the job's object goes (ttlSecondsAfterFinished or stop)
            owner = {"apiVersion": manifest["apiVersion"], "kind": kind, "name": name, "uid": handle["uid"]}
            if kind == "Job" and launch.limits.workers > 1:
                service = self.build_service_manifest(launch)
                service["metadata"]["ownerReferences"] = [owner]
                handle["service"] = name
                try:
                    await core.create_namespaced_service(namespace, service)
                except ApiException as exc:
                    if exc.status != 409:
                        raise self._refused(exc, namespace, f"creating Service {name}") from exc
            if handle["secret"]:
                patch = {"metadata": {"ownerReferences": [owner]}}
                try:
                    await core.patch_namespaced_secret(handle["secret"], namespace, patch)
                except ApiException as exc:
                    raise self._refused(
                        exc, namespace, f"linking Secret {handle['secret']} to its {kind}"
                    ) from exc
        return handle

    async def _read_token(self, core: CoreV1Api, namespace: str, name: str) -> str:
        secret = await core.read_namespaced_secret(name, namespace)
        return base64.b64decode((secret.data or {})[TOKEN_KEY]).decode()

    async def _pods(self, core: CoreV1Api, namespace: str, launch: JobLaunch) -> list[dict]:
        selector = f"{JOB_ID_LABEL}={label_value(launch.job_id)}"
        result = await core.list_namespaced_pod(namespace, label_selector=selector)
        pods = core.api_client.sanitize_for_serialization(result).get("items", [])
        return sorted(pods, key=lambda pod: pod["metadata"].get("creationTimestamp", ""))

    async def poll(self, launch: JobLaunch, handle: dict) -> ExecutionState:
        """Read the job's object and pods and say whether the job runs, and why it stopped.

        For several workers the pod that says why is the first failed worker, else worker 0.
        """
        namespace, name, kind = handle["namespace"], handle["name"], handle.get("kind", "Job")
        async with self._api(f"checking job {launch.job_id}") as (api, _, core):
            try:
                job = await self._read(api, kind, name, namespace)
            except ApiException as exc:
                if exc.status == 404:
                    return ExecutionState(
                        running=False,
                        reason=f"lost: the Kubernetes {kind} {namespace}/{name} no longer exists",
                        handle=handle,
                    )
                raise self._refused(exc, namespace, f"reading {kind} {name}") from exc
            pods = await self._pods(core, namespace, launch)
            container = _container(kind)
            if handle.get("workers", 1) > 1:
                failed = [p for p in pods if (_terminated(p, container) or {}).get("exitCode", 0) != 0]
                first = [p for p in pods if _rank(p) == 0]
                pod = (failed or first or pods or [None])[0]
            else:
                pod = pods[-1] if pods else None
            handle = {**handle, "pod": pod["metadata"]["name"] if pod else None}
            if pod and pod.get("spec", {}).get("nodeName"):
                handle["node"] = pod["spec"]["nodeName"]
            state = self._state(launch, job, pod, handle)
            if state.running and pod is None and not job["metadata"].get("deletionTimestamp"):
                refusal = await self._creation_refusal(core, namespace, kind, name)
                if refusal:
                    return ExecutionState(running=False, reason=refusal, handle=handle)
            if handle.get("workers", 1) > 1 and not state.running and pod is not None and state.exit_code:
                # name the worker, and its last line: the job's output.log is worker 0's
                reason = state.reason
                if reason is None:
                    log = await self._pod_log(core, namespace, pod, container, tail_lines=20)
                    reason = f"exited with code {state.exit_code}: {last_line(log)}".rstrip(": ")
                state.reason = f"worker {_rank(pod)} {reason}"
            return state

    def _state(self, launch: JobLaunch, job: dict, pod: dict | None, handle: dict) -> ExecutionState:
        status = job.get("status", {})
        conditions = {c["type"]: c for c in status.get("conditions", []) if c.get("status") == "True"}
        container = _container(job.get("kind") or handle.get("kind", "Job"))
        terminated = _terminated(pod, container)
        completions = (job.get("spec") or {}).get("completions") or 1
        # Complete: a Job; Succeeded: a PyTorchJob
        if (
            "Complete" in conditions
            or "Succeeded" in conditions
            or (status.get("succeeded") or 0) >= completions
        ):
            return ExecutionState(running=False, exit_code=0, handle=handle)
        if "Failed" in conditions or status.get("failed"):
            exit_code = terminated.get("exitCode") if terminated else None
            if terminated and terminated.get("reason") == "OOMKilled":
                reason = f"exceeded its memory limit of {launch.limits.memory} MB"
            elif pod and pod.get("status", {}).get("reason") == "Evicted":
                reason = f"evicted: {pod['status'].get('message', '')}".strip()
            elif terminated:
                reason = None  # a plain non-zero exit: the exit code and the log say it
            else:
                failed = conditions.get("Failed", {})
                reason = failed.get("message") or failed.get("reason") or "the Kubernetes Job failed"
            return ExecutionState(running=False, exit_code=exit_code, reason=reason, handle=handle)
        if job["metadata"].get("deletionTimestamp"):
            return ExecutionState(running=True, reason="stopping", handle=handle)
        waiting = _waiting(pod, container)
        if waiting and waiting.get("reason") in FATAL_WAITING:
            image = pod["spec"]["containers"][0]["image"]
            return ExecutionState(
                running=False,
                reason=f"image {image} could not be pulled ({waiting['reason']}): {waiting.get('message', '')}",
                handle=handle,
            )
        for condition in (pod or {}).get("status", {}).get("conditions", []):
            if condition.get("type") == "PodScheduled" and condition.get("reason") == "Unschedulable":
                return ExecutionState(
                    running=True, reason=f"not scheduled yet: {condition.get('message', '')}", handle=handle
                )
        return ExecutionState(running=True, handle=handle)

    async def _creation_refusal(self, core: CoreV1Api, namespace: str, kind: str, name: str) -> str | None:
        # A pod refused by a quota leaves no pod, only an event on the Job.
        selector = f"involvedObject.kind={kind},involvedObject.name={name}"
        events = core.api_client.sanitize_for_serialization(
            await core.list_namespaced_event(namespace, field_selector=selector)
        ).get("items", [])
        for event in reversed(events):
            message = event.get("message", "")
            if event.get("reason") == "FailedCreate" and "exceeded quota" in message:
                return quota_message(namespace, message)
        return None

    async def stop(self, launch: JobLaunch, handle: dict, grace_seconds: float = 10.0) -> None:
        """Delete the job's object and pods (SIGTERM, SIGKILL after the grace period) and wait until gone."""
        namespace, name, kind = handle["namespace"], handle["name"], handle.get("kind", "Job")
        grace = max(0, round(grace_seconds))
        await self._keep_log(launch, handle)  # the pods and their logs go with the Job
        async with self._api(f"stopping job {launch.job_id}") as (api, _, core):
            pods = await self._pods(core, namespace, launch)
            try:
                await self._delete(api, kind, name, namespace, grace)
            except ApiException as exc:
                if exc.status != 404:
                    raise self._refused(exc, namespace, f"deleting {kind} {name}") from exc
            # Foreground deletion gives pods their own grace period; the caller's is this one.
            for pod in pods:
                await _delete_quietly(
                    core.delete_namespaced_pod(pod["metadata"]["name"], namespace, grace_period_seconds=grace)
                )
            deadline = asyncio.get_running_loop().time() + grace + self.termination_grace_seconds
            while asyncio.get_running_loop().time() < deadline:
                try:
                    await self._read(api, kind, name, namespace)
                except ApiException as exc:
                    if exc.status == 404:
                        return
                    raise self._refused(exc, namespace, f"reading {kind} {name}") from exc
                await asyncio.sleep(0.5)
            self.log.warning("%s %s/%s is still being deleted after the grace period", kind, namespace, name)

    async def attach(self, launch: JobLaunch, handle: dict) -> ExecutionState:
        """Find the job's Job or PyTorchJob by its label after a restart, or say it is lost."""
        namespace = handle.get("namespace") or self.namespace_for(launch.project)
        selector = f"{JOB_ID_LABEL}={label_value(launch.job_id)}"
        kinds = [handle["kind"]] if handle.get("kind") else ["Job"]
        if not handle.get("kind") and launch.limits.workers > 1:
            kinds.append("PyTorchJob")  # the handle was never stored: either may have been created
        async with self._api(f"attaching job {launch.job_id}") as (api, _, core):
            found: list[dict] = []
            for kind in kinds:
                try:
                    found = await self._list(api, kind, namespace, selector)
                except ApiException as exc:
                    if exc.status == 404 and kind == "PyTorchJob":
                        continue  # the cluster has no Training Operator
                    raise self._refused(exc, namespace, f"listing {kind}s") from exc
                if found:
                    break
            if not found:
                return ExecutionState(
                    running=False,
                    reason=f"lost: no Kubernetes {' or '.join(kinds)} labelled {selector} in namespace {namespace}",
                    handle=handle,
                )
            job = found[0]
            handle = {
                "secret": None,
                "token_sha256": None,
                **handle,
                "namespace": namespace,
                "name": job["metadata"]["name"],
                "uid": job["metadata"]["uid"],
            }
            if launch.limits.workers > 1:
                handle.update(kind=kind, workers=launch.limits.workers)
            if self.events_url and not handle.get("token_sha256"):
                handle["secret"] = secret_name(launch.job_id)
                try:
                    token = await self._read_token(core, namespace, handle["secret"])
                    handle["token_sha256"] = hashlib.sha256(token.encode()).hexdigest()
                except ApiException as exc:
                    if exc.status != 404:
                        raise self._refused(exc, namespace, "reading the token Secret") from exc
        return await self.poll(launch, handle)

    async def _pod_log(
        self, core: CoreV1Api, namespace: str, pod: dict, container: str, tail_lines: int | None = None
    ) -> str:
        kwargs: dict = {"container": container, "limit_bytes": self.log_limit_bytes}
        if tail_lines is not None:
            kwargs["tail_lines"] = tail_lines
        try:
            return await core.read_namespaced_pod_log(pod["metadata"]["name"], namespace, **kwargs)
        except ApiException as exc:
            # 400: the container has not started yet; 404: the pod just went.
            if exc.status in (400, 404):
                return ""
            raise self._refused(exc, namespace, "reading a pod log") from exc

    async def logs(
        self, launch: JobLaunch, handle: dict, tail_lines: int | None = None, worker: int = 0
    ) -> str:
        """Return the log of the job's latest pod, or of one worker's ("" when there is no pod any more)."""
        namespace = handle["namespace"]
        async with self._api(f"reading the log of job {launch.job_id}") as (_, _batch, core):
            pods = await self._pods(core, namespace, launch)
            if handle.get("workers", 1) > 1:
                pods = [pod for pod in pods if _rank(pod) == worker]
            if not pods:
                return ""
            container = _container(handle.get("kind", "Job"))
            return await self._pod_log(core, namespace, pods[-1], container, tail_lines)

    async def _keep_log(self, launch: JobLaunch, handle: dict) -> None:
        if not launch.run_dir.is_dir():
            return
        for worker in range(handle.get("workers", 1)):
            text = await self.logs(launch, handle, worker=worker)
            if text:
                # the pods wrote the run folder as the job's user: a link in it leads nowhere
                try:
                    write_atomic(worker_log(launch.run_dir, worker), text, within=launch.run_dir, mode=0o600)
                except Refused as error:
                    self.log.warning("job %s: its log is not kept: %s", launch.job_id, error)

    async def on_complete(self, launch: JobLaunch, state: ExecutionState) -> None:
        """Keep the pod logs in the run folder before Kubernetes deletes the finished Job."""
        await self._keep_log(launch, state.handle)

    async def on_failure(self, launch: JobLaunch, state: ExecutionState) -> None:
        """Keep the pod logs, then delete a Job that cannot finish on its own (e.g. bad image)."""
        if not state.handle.get("name"):
            return
        if state.exit_code is None and not (state.reason or "").startswith("lost:"):
            await self.stop(launch, state.handle, grace_seconds=0)  # keeps the log first
        else:
            await self._keep_log(launch, state.handle)


def _container(kind: str) -> str:
    """Return the name of the job's container in the pods of a Job or PyTorchJob."""
    return PYTORCH_CONTAINER if kind == "PyTorchJob" else CONTAINER


def _rank(pod: dict) -> int:
    """Return the worker a pod runs: its completion index, or its PyTorchJob replica (Master is 0)."""
    meta = pod.get("metadata", {})
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    if labels.get(REPLICA_TYPE, "").lower() == "worker":
        return int(labels.get(REPLICA_INDEX, 0)) + 1
    return int(annotations.get(COMPLETION_INDEX, 0))


def _terminated(pod: dict | None, container: str = CONTAINER) -> dict | None:
    for status in (pod or {}).get("status", {}).get("containerStatuses", []):
        if status.get("name") == container and "terminated" in status.get("state", {}):
            return status["state"]["terminated"]
    return None


def _waiting(pod: dict | None, container: str = CONTAINER) -> dict | None:
    for status in (pod or {}).get("status", {}).get("containerStatuses", []):
        if status.get("name") == container and "waiting" in status.get("state", {}):
            return status["state"]["waiting"]
    return None


async def _delete_quietly(call) -> None:
    try:
        await call
    except ApiException as exc:
        if exc.status != 404:
            raise


__all__ = [
    "KubernetesAPIError",
    "KubernetesExecutor",
    "KubernetesQuotaError",
    "dns_label",
    "job_name",
    "label_value",
    "quota_message",
    "secret_name",
]
