"""A Kubernetes API double: the paths kubernetes_asyncio calls, answered like an API server."""

from __future__ import annotations

import base64
import copy
import json
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "k8s"


def fixture(name: str) -> dict:
    """Return a recorded API object from tests/fixtures/k8s."""
    return json.loads((FIXTURES / name).read_text())


@dataclass
class Request:
    """One request the double received."""

    method: str
    path: str
    query: dict[str, str]
    body: object
    headers: dict[str, str]


def _status(code: int, reason: str, message: str, details: dict | None = None) -> web.Response:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return web.json_response(body, status=code)


def _matches(labels: dict, selector: str) -> bool:
    for term in filter(None, selector.split(",")):
        key, sep, value = term.partition("=")
        if not sep or "!" in key or value.startswith("="):
            raise ValueError(f"the double only serves equality selectors, got {selector!r}")
        if labels.get(key) != value:
            return False
    return True


def _merge(target: dict, patch: dict) -> None:
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        elif value is None:
            target.pop(key, None)
        else:
            target[key] = copy.deepcopy(value)


class K8sDouble:
    """Serve jobs, deployments, secrets, services, pods, pod logs and events, recording every request.

    With `training_operator`, it also serves the Kubeflow Training Operator's PyTorchJobs
    (kubeflow.org/v1), as a cluster with the operator's CRDs installed does.
    """

    def __init__(self, training_operator: bool = False) -> None:
        self.training_operator = training_operator
        self.requests: list[Request] = []
        self.jobs: dict[tuple[str, str], dict] = {}
        self.deployments: dict[tuple[str, str], dict] = {}
        self.pytorchjobs: dict[tuple[str, str], dict] = {}
        self.services: dict[tuple[str, str], dict] = {}
        self.secrets: dict[tuple[str, str], dict] = {}
        self.pods: dict[tuple[str, str], dict] = {}
        self.events: dict[str, list[dict]] = {}
        self.logs: dict[tuple[str, str], str] = {}
        self.failures: dict[tuple[str, str], tuple[int, dict]] = {}
        self._version = 184400
        self._runner: web.AppRunner | None = None
        self.url = ""

    # -- test controls ---------------------------------------------------------------------

    def fail(self, method: str, path: str, status: int, body: dict) -> None:
        """Answer the next `method path` with this status and body."""
        self.failures[(method, path)] = (status, body)

    def set_job_status(self, namespace: str, name: str, status: dict) -> None:
        """Give a stored Job the status the job controller would have written."""
        self.jobs[(namespace, name)]["status"] = copy.deepcopy(status)
        self.jobs[(namespace, name)]["metadata"]["resourceVersion"] = self._next_version()

    def set_deployment_status(self, namespace: str, name: str, status: dict) -> None:
        """Give a stored Deployment the status the deployment controller would have written."""
        self.deployments[(namespace, name)]["status"] = copy.deepcopy(status)
        self.deployments[(namespace, name)]["metadata"]["resourceVersion"] = self._next_version()

    def set_pytorchjob_status(self, namespace: str, name: str, status: dict) -> None:
        """Give a stored PyTorchJob the status the Training Operator would have written."""
        self.pytorchjobs[(namespace, name)]["status"] = copy.deepcopy(status)
        self.pytorchjobs[(namespace, name)]["metadata"]["resourceVersion"] = self._next_version()

    def add_pod(self, pod: dict) -> None:
        """Store a pod, owned by the Job (or PyTorchJob) its `job-name` label names, as their controllers do.

        A pod with neither label is a Deployment's (its ReplicaSet, which the double does not keep, owns it).
        """
        pod = copy.deepcopy(pod)
        meta = pod["metadata"]
        if "training.kubeflow.org/job-name" in meta["labels"]:
            job = self.pytorchjobs[(meta["namespace"], meta["labels"]["training.kubeflow.org/job-name"])]
        elif "job-name" in meta["labels"]:
            job = self.jobs[(meta["namespace"], meta["labels"]["job-name"])]
        else:
            self.pods[(meta["namespace"], meta["name"])] = pod
            return
        uid = job["metadata"]["uid"]
        meta["labels"]["batch.kubernetes.io/controller-uid"] = uid
        meta["labels"]["controller-uid"] = uid
        for owner in meta.get("ownerReferences", []):
            owner["uid"] = uid
        self.pods[(meta["namespace"], meta["name"])] = pod

    def add_event(self, event: dict) -> None:
        """Store an event about an object."""
        event = copy.deepcopy(event)
        namespace = event["metadata"]["namespace"]
        job = self.jobs.get((namespace, event["involvedObject"]["name"]))
        if job:
            event["involvedObject"]["uid"] = job["metadata"]["uid"]
        self.events.setdefault(namespace, []).append(event)

    def sent(self, method: str, path_end: str = "") -> list[Request]:
        """Return the requests with this method whose path ends with `path_end`."""
        return [r for r in self.requests if r.method == method and r.path.endswith(path_end)]

    # -- server ----------------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application(middlewares=[self._record])
        batch = "/apis/batch/v1/namespaces/{ns}/jobs"
        core = "/api/v1/namespaces/{ns}"
        app.router.add_post(batch, self.create_job)
        app.router.add_get(batch, self.list_jobs)
        app.router.add_get(batch + "/{name}", self.read_job)
        app.router.add_delete(batch + "/{name}", self.delete_job)
        kubeflow = "/apis/kubeflow.org/v1"
        app.router.add_get(kubeflow, self.kubeflow_resources)
        app.router.add_post(kubeflow + "/namespaces/{ns}/pytorchjobs", self.create_pytorchjob)
        app.router.add_get(kubeflow + "/namespaces/{ns}/pytorchjobs", self.list_pytorchjobs)
        app.router.add_get(kubeflow + "/namespaces/{ns}/pytorchjobs/{name}", self.read_pytorchjob)
        app.router.add_delete(kubeflow + "/namespaces/{ns}/pytorchjobs/{name}", self.delete_pytorchjob)
        apps = "/apis/apps/v1/namespaces/{ns}/deployments"
        app.router.add_post(apps, self.create_deployment)
        app.router.add_get(apps + "/{name}", self.read_deployment)
        app.router.add_patch(apps + "/{name}", self.patch_deployment)
        app.router.add_delete(apps + "/{name}", self.delete_deployment)
        app.router.add_post(core + "/services", self.create_service)
        app.router.add_get(core + "/services/{name}", self.read_service)
        app.router.add_delete(core + "/services/{name}", self.delete_service)
        app.router.add_post(core + "/secrets", self.create_secret)
        app.router.add_get(core + "/secrets/{name}", self.read_secret)
        app.router.add_patch(core + "/secrets/{name}", self.patch_secret)
        app.router.add_delete(core + "/secrets/{name}", self.delete_secret)
        app.router.add_get(core + "/pods", self.list_pods)
        app.router.add_delete(core + "/pods/{name}", self.delete_pod)
        app.router.add_get(core + "/pods/{name}/log", self.read_log)
        app.router.add_get(core + "/events", self.list_events)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        site = web.SockSite(self._runner, sock)
        await site.start()
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def kubeconfig(self, path: Path, token: str = "double-token") -> Path:
        """Write a kubeconfig pointing at the double and return its path."""
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "double", "cluster": {"server": self.url}}],
            "users": [{"name": "kpl", "user": {"token": token}}],
            "contexts": [{"name": "double", "context": {"cluster": "double", "user": "kpl"}}],
            "current-context": "double",
        }
        path.write_text(json.dumps(cfg))
        return path

    @web.middleware
    async def _record(self, request: web.Request, handler) -> web.StreamResponse:
        raw = await request.read()
        body = json.loads(raw) if raw else None
        self.requests.append(
            Request(request.method, request.path, dict(request.query), body, dict(request.headers))
        )
        failure = self.failures.pop((request.method, request.path), None)
        if failure:
            return web.json_response(failure[1], status=failure[0])
        return await handler(request)

    # -- handlers --------------------------------------------------------------------------

    def _next_version(self) -> str:
        self._version += 1
        return str(self._version)

    def _server_fields(self, obj: dict, namespace: str) -> dict:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta.update(
            namespace=namespace,
            uid=str(uuid.uuid4()),
            resourceVersion=self._next_version(),
            creationTimestamp="2025-05-14T09:12:03Z",
        )
        return obj

    async def create_job(self, request: web.Request) -> web.Response:
        ns, body = request.match_info["ns"], await request.json()
        name = body["metadata"]["name"]
        if (ns, name) in self.jobs:
            return _status(
                409,
                "AlreadyExists",
                f'jobs.batch "{name}" already exists',
                {"name": name, "group": "batch", "kind": "jobs"},
            )
        job = self._server_fields(body, ns)
        uid = job["metadata"]["uid"]
        job["metadata"]["generation"] = 1
        spec = job["spec"]
        spec.setdefault("parallelism", 1)
        spec.setdefault("completions", 1)
        spec.setdefault("completionMode", "NonIndexed")
        spec["suspend"] = False
        spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
        spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
        spec["template"]["metadata"]["labels"].update(
            {
                "batch.kubernetes.io/controller-uid": uid,
                "batch.kubernetes.io/job-name": name,
                "controller-uid": uid,
                "job-name": name,
            }
        )
        job["status"] = {}
        self.jobs[(ns, name)] = job
        return web.json_response(job, status=201)

    async def list_jobs(self, request: web.Request) -> web.Response:
        ns, selector = request.match_info["ns"], request.query.get("labelSelector", "")
        items = [
            j
            for (n, _), j in self.jobs.items()
            if n == ns and _matches(j["metadata"].get("labels", {}), selector)
        ]
        return web.json_response(
            {
                "kind": "JobList",
                "apiVersion": "batch/v1",
                "metadata": {"resourceVersion": "184999"},
                "items": items,
            }
        )

    async def read_job(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["name"]
        if (ns, name) not in self.jobs:
            return _status(
                404,
                "NotFound",
                f'jobs.batch "{name}" not found',
                {"name": name, "group": "batch", "kind": "jobs"},
            )
        return web.json_response(self.jobs[(ns, name)])

    async def delete_job(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["name"]
        job = self.jobs.pop((ns, name), None)
        if job is None:
            return _status(
                404,
                "NotFound",
                f'jobs.batch "{name}" not found',
                {"name": name, "group": "batch", "kind": "jobs"},
            )
        return web.json_response(self._deleted(job, request))

    def _deleted(self, owner: dict, request: web.Request) -> dict:
        # The garbage collector takes what the object owns; the double does it at once.
        uid = owner["metadata"]["uid"]
        for store in (self.pods, self.secrets, self.services):
            for key in [
                k
                for k, o in store.items()
                if any(r["uid"] == uid for r in o["metadata"].get("ownerReferences", []))
            ]:
                del store[key]
        owner["metadata"]["deletionTimestamp"] = "2025-05-14T09:20:00Z"
        owner["metadata"]["deletionGracePeriodSeconds"] = 0
        if request.query.get("propagationPolicy") == "Foreground":
            owner["metadata"]["finalizers"] = ["foregroundDeletion"]
        return owner

    async def kubeflow_resources(self, request: web.Request) -> web.Response:
        if not self.training_operator:
            return _status(404, "NotFound", "the server could not find the requested resource")
        return web.json_response(fixture("kubeflow_v1_resources.json"))

    async def create_pytorchjob(self, request: web.Request) -> web.Response:
        if not self.training_operator:
            return _status(404, "NotFound", "the server could not find the requested resource")
        ns, body = request.match_info["ns"], await request.json()
        name = body["metadata"]["name"]
        if (ns, name) in self.pytorchjobs:
            return _status(
                409,
                "AlreadyExists",
                f'pytorchjobs.kubeflow.org "{name}" already exists',
                {"name": name, "group": "kubeflow.org", "kind": "pytorchjobs"},
            )
        job = self._server_fields(body, ns)
        job["metadata"]["generation"] = 1
        self.pytorchjobs[(ns, name)] = job
        return web.json_response(job, status=201)

    async def list_pytorchjobs(self, request: web.Request) -> web.Response:
        if not self.training_operator:
            return _status(404, "NotFound", "the server could not find the requested resource")
        ns, selector = request.match_info["ns"], request.query.get("labelSelector", "")
        items = [
            j
            for (n, _), j in self.pytorchjobs.items()
            if n == ns and _matches(j["metadata"].get("labels", {}), selector)
        ]
        return web.json_response(
            {
                "kind": "PyTorchJobList",
                "apiVersion": "kubeflow.org/v1",
                "metadata": {"resourceVersion": "184999"},
                "items": items,
            }
        )

    async def read_pytorchjob(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["name"]
        if (ns, name) not in self.pytorchjobs:
            return _status(
                404,
                "NotFound",
                f'pytorchjobs.kubeflow.org "{name}" not found',
                {"name": name, "group": "kubeflow.org", "kind": "pytorchjobs"},
            )
        return web.json_response(self.pytorchjobs[(ns, name)])

    async def delete_pytorchjob(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["name"]
        job = self.pytorchjobs.pop((ns, name), None)
        if job is None:
            return _status(
                404,
                "NotFound",
                f'pytorchjobs.kubeflow.org "{name}" not found',
                {"name": name, "group": "kubeflow.org", "kind": "pytorchjobs"},
            )
        return web.json_response(self._deleted(job, request))

    async def create_deployment(self, request: web.Request) -> web.Response:
        ns, body = request.match_info["ns"], await request.json()
        name = body["metadata"]["name"]
        if (ns, name) in self.deployments:
            return _status(
                409,
                "AlreadyExists",
                f'deployments.apps "{name}" already exists',
                {"name": name, "group": "apps", "kind": "deployments"},
            )
        deployment = self._server_fields(body, ns)
        deployment["metadata"]["generation"] = 1
        deployment["metadata"].setdefault("annotations", {})["deployment.kubernetes.io/revision"] = "1"
        spec = deployment["spec"]
        # the API server's defaults for apps/v1 Deployments
        spec.setdefault("replicas", 1)
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
        spec.setdefault(
            "strategy",
            {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
        )
        pod = spec["template"]["spec"]
        pod.setdefault("dnsPolicy", "ClusterFirst")
        pod.setdefault("schedulerName", "default-scheduler")
        for container in pod["containers"]:
            container.setdefault("imagePullPolicy", "IfNotPresent")
            container.setdefault("terminationMessagePath", "/dev/termination-log")
            container.setdefault("terminationMessagePolicy", "File")
        deployment["status"] = {}
        self.deployments[(ns, name)] = deployment
        return web.json_response(deployment, status=201)

    def _deployment_missing(self, name: str) -> web.Response:
        return _status(
            404,
            "NotFound",
            f'deployments.apps "{name}" not found',
            {"name": name, "group": "apps", "kind": "deployments"},
        )

    async def read_deployment(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["name"]
        if (ns, name) not in self.deployments:
            return self._deployment_missing(name)
        return web.json_response(self.deployments[(ns, name)])

    async def patch_deployment(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["name"]
        if request.content_type != "application/strategic-merge-patch+json":
            return _status(
                415,
                "UnsupportedMediaType",
                f"the double expects a strategic merge patch, got {request.content_type}",
            )
        if (ns, name) not in self.deployments:
            return self._deployment_missing(name)
        deployment = self.deployments[(ns, name)]
        before = copy.deepcopy(deployment["spec"])
        # maps merge; the double replaces lists whole (a strategic merge would merge them by name)
        _merge(deployment, await request.json())
        meta = deployment["metadata"]
        if deployment["spec"] != before:  # any spec change bumps the generation, as the API server does
            meta["generation"] += 1
        meta["resourceVersion"] = self._next_version()
        return web.json_response(deployment)

    async def delete_deployment(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["name"]
        deployment = self.deployments.pop((ns, name), None)
        if deployment is None:
            return self._deployment_missing(name)
        return web.json_response(self._deleted(deployment, request))

    async def read_service(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["name"]
        if (ns, name) not in self.services:
            return _status(
                404, "NotFound", f'services "{name}" not found', {"name": name, "kind": "services"}
            )
        return web.json_response(self.services[(ns, name)])

    async def delete_service(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["name"]
        service = self.services.pop((ns, name), None)
        if service is None:
            return _status(
                404, "NotFound", f'services "{name}" not found', {"name": name, "kind": "services"}
            )
        return web.json_response(service)

    async def create_service(self, request: web.Request) -> web.Response:
        ns, body = request.match_info["ns"], await request.json()
        name = body["metadata"]["name"]
        if (ns, name) in self.services:
            return _status(
                409, "AlreadyExists", f'services "{name}" already exists', {"name": name, "kind": "services"}
            )
        service = self._server_fields(body, ns)
        # a headless Service keeps "None"; others get an address from the service range
        address = service["spec"].setdefault(
            "clusterIP", f"10.96.{len(self.services) // 250}.{len(self.services) % 250 + 2}"
        )
        service["spec"].setdefault("clusterIPs", [address])
        service["spec"].setdefault("type", "ClusterIP")
        self.services[(ns, name)] = service
        return web.json_response(service, status=201)

    async def create_secret(self, request: web.Request) -> web.Response:
        ns, body = request.match_info["ns"], await request.json()
        name = body["metadata"]["name"]
        if (ns, name) in self.secrets:
            return _status(
                409, "AlreadyExists", f'secrets "{name}" already exists', {"name": name, "kind": "secrets"}
            )
        secret = self._server_fields(body, ns)
        # The API server stores stringData base64-encoded in data.

        secret["data"] = {
            k: base64.b64encode(v.encode()).decode() for k, v in secret.pop("stringData", {}).items()
        }
        self.secrets[(ns, name)] = secret
        return web.json_response(secret, status=201)

    async def read_secret(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["name"]
        if (ns, name) not in self.secrets:
            return _status(404, "NotFound", f'secrets "{name}" not found', {"name": name, "kind": "secrets"})
        return web.json_response(self.secrets[(ns, name)])

    async def patch_secret(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["name"]
        if request.content_type != "application/strategic-merge-patch+json":
            return _status(
                415,
                "UnsupportedMediaType",
                f"the double expects a strategic merge patch, got {request.content_type}",
            )
        if (ns, name) not in self.secrets:
            return _status(404, "NotFound", f'secrets "{name}" not found', {"name": name, "kind": "secrets"})
        patch = await request.json()
        secret = self.secrets[(ns, name)]
        secret["metadata"].update(patch.get("metadata", {}))
        secret["metadata"]["resourceVersion"] = self._next_version()
        return web.json_response(secret)

    async def delete_secret(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["name"]
        if self.secrets.pop((ns, name), None) is None:
            return _status(404, "NotFound", f'secrets "{name}" not found', {"name": name, "kind": "secrets"})
        return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"})

    async def list_pods(self, request: web.Request) -> web.Response:
        ns, selector = request.match_info["ns"], request.query.get("labelSelector", "")
        items = [
            p for (n, _), p in self.pods.items() if n == ns and _matches(p["metadata"]["labels"], selector)
        ]
        return web.json_response(
            {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "184999"}, "items": items}
        )

    async def delete_pod(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["name"]
        pod = self.pods.pop((ns, name), None)
        if pod is None:
            return _status(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
        return web.json_response(pod)

    async def read_log(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["name"]
        if (ns, name) not in self.pods:
            return _status(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
        text = self.logs.get((ns, name), "")
        if "tailLines" in request.query:
            lines = text.splitlines(keepends=True)
            text = "".join(lines[-int(request.query["tailLines"]) :])
        return web.Response(text=text, content_type="text/plain")

    async def list_events(self, request: web.Request) -> web.Response:
        ns = request.match_info["ns"]
        fields = dict(
            term.split("=", 1) for term in request.query.get("fieldSelector", "").split(",") if term
        )
        items = [
            e
            for e in self.events.get(ns, [])
            if all(e["involvedObject"].get(k.split(".", 1)[1]) == v for k, v in fields.items())
        ]
        return web.json_response(
            {
                "kind": "EventList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": "184999"},
                "items": items,
            }
        )
