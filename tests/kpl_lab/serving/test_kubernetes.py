"""Deployments on Kubernetes: Deployment, Service and InferenceService manifests, and the API calls against the double."""

from __future__ import annotations

import asyncio
import copy
import importlib.util
import sys
import threading
from pathlib import Path

import pytest
import yaml
from sqlalchemy import select

from kpl_lab.catalog.jobs import Reservation
from kpl_lab.engine.kubernetes import KubernetesAPIError, KubernetesExecutor
from kpl_lab.engine.launch import Resources
from kpl_lab.errors import BadRequest, Forbidden, NotFound, Unavailable
from kpl_lab.serving.describe import deployment_model
from kpl_lab.serving.kubernetes import KubernetesDeployments, ServedVersion, deployment_state


def _load_double():
    # the job executor's API double, loaded by path like its own tests do
    path = Path(__file__).resolve().parents[1] / "engine" / "k8s_double.py"
    spec = importlib.util.spec_from_file_location("kpl_tests_k8s_double", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


_double = _load_double()
K8sDouble, fixture = _double.K8sDouble, _double.fixture

NS = "kpl-demo"
STORAGE = Path("/srv/kpl")
NAME = "kpl-serve-digits-digits-2-"  # dns_label hashes the ':' away; the prefix stays


def served(root: Path = STORAGE, **changes) -> ServedVersion:
    project_dir = root / "projects" / "demo"
    values = dict(
        project="demo",
        deployment="digits",
        model_version="digits:2",
        cmd="python serve.py",
        image="registry.example.com/kpl/pytorch:2.3-cuda12",
        algorithm_dir=project_dir / "algorithms" / "digits" / "ab12cd",
        model_dir=project_dir / "models" / "digits" / "2",
        run_dir=project_dir / "deployments" / "digits" / "digits-2",
        replicas=2,
        limits=Resources(cpu=1, memory=2048, shm=0),
        parameters={"threshold": 0.5},
    )
    values.update(changes)
    return ServedVersion(**values)


def deployments(**config) -> KubernetesDeployments:
    config.setdefault("storage_root", str(STORAGE))
    config.setdefault("device_resources", {"gpu": "nvidia.com/gpu", "npu": "huawei.com/Ascend910"})
    return KubernetesDeployments(KubernetesExecutor(**config))


def pod(manifest: dict) -> dict:
    return manifest["spec"]["template"]["spec"]


def env(container: dict) -> dict:
    return {e["name"]: e.get("value") for e in container["env"]}


# -- manifests ---------------------------------------------------------------------------


def test_a_version_is_a_deployment_of_its_replicas_with_probes_on_health():
    version = served()
    manifest = deployments().build_deployment_manifest(version)

    assert manifest["apiVersion"] == "apps/v1" and manifest["kind"] == "Deployment"
    assert manifest["metadata"]["name"].startswith(NAME) and manifest["metadata"]["namespace"] == NS
    labels = manifest["metadata"]["labels"]
    assert labels["app.kubernetes.io/component"] == "deployment"
    assert labels["kpl-lab.io/project"] == "demo" and labels["kpl-lab.io/deployment"] == "digits"
    spec = manifest["spec"]
    assert spec["replicas"] == 2
    assert spec["selector"] == {"matchLabels": labels}
    assert spec["template"]["metadata"]["labels"] == labels
    assert spec["template"]["metadata"]["annotations"]["kpl-lab.io/model-version"] == "digits:2"
    assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    assert pod(manifest)["restartPolicy"] == "Always"
    [container] = pod(manifest)["containers"]
    assert container["command"] == ["/bin/sh", "-c", "python serve.py"]
    assert container["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}
    assert container["livenessProbe"]["failureThreshold"] == 3
    assert container["startupProbe"]["failureThreshold"] == 120  # 600 s at one probe every 5 s
    variables = env(container)
    assert variables["KPL_ENV"] == "deploy" and variables["KPL_ENV_FUNCTION"] == "deploy"
    assert variables["KPL_DEPLOY_PORT"] == "8080"
    assert variables["KPL_ENV_INPUT_ROOT_PATH"] == "/kpl/inputs"
    assert variables["CUDA_VISIBLE_DEVICES"] == ""  # no device asked: none visible


def test_the_model_is_mounted_read_only_like_a_job_input():
    manifest = deployments().build_deployment_manifest(served())
    mounts = {m["mountPath"]: m for m in pod(manifest)["containers"][0]["volumeMounts"]}
    assert mounts["/kpl/inputs/model"] == {
        "name": "kpl-storage",
        "mountPath": "/kpl/inputs/model",
        "readOnly": True,
        "subPath": "projects/demo/models/digits/2",
    }
    assert mounts["/kpl/algorithm"]["readOnly"] is True
    assert mounts["/kpl/run"]["subPath"] == "projects/demo/deployments/digits/digits-2"
    assert pod(manifest)["volumes"] == [
        {"name": "kpl-storage", "persistentVolumeClaim": {"claimName": "kpl-storage"}}
    ]


def test_gpu_and_npu_replicas_ask_for_the_device_resources_the_job_executor_names():
    manager = deployments(
        device_node_selectors={"npu": {"accelerator": "ascend-910b"}},
        device_tolerations={"gpu": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
    )
    limits = Resources(cpu=4, memory=8192, shm=1024, devices={"gpu": 1, "npu": 2})
    manifest = manager.build_deployment_manifest(served(limits=limits))
    resources = pod(manifest)["containers"][0]["resources"]
    assert resources["limits"] == {
        "cpu": "4000m",
        "memory": "8192Mi",
        "nvidia.com/gpu": "1",
        "huawei.com/Ascend910": "2",
    }
    assert resources["requests"]["nvidia.com/gpu"] == "1"
    assert pod(manifest)["nodeSelector"] == {"accelerator": "ascend-910b"}
    assert pod(manifest)["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert "CUDA_VISIBLE_DEVICES" not in env(pod(manifest)["containers"][0])


def test_a_device_with_no_resource_name_is_refused():
    manager = deployments(device_resources={})
    with pytest.raises(BadRequest, match="device_resources"):
        manager.build_deployment_manifest(served(limits=Resources(devices={"gpu": 1})))


def test_the_service_selects_exactly_its_versions_pods():
    manager = deployments()
    production, canary = served(), served(model_version="digits:3", run_dir=STORAGE / "r3")
    service = manager.build_service_manifest(production)
    assert service["kind"] == "Service" and service["spec"]["type"] == "ClusterIP"
    assert (
        service["spec"]["selector"]
        == manager.build_deployment_manifest(production)["spec"]["selector"]["matchLabels"]
    )
    assert service["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}]
    # production and canary: two Deployments whose pods no Service shares
    other = manager.build_service_manifest(canary)
    assert other["metadata"]["name"] != service["metadata"]["name"]
    assert other["spec"]["selector"] != service["spec"]["selector"]


def test_an_inference_service_serves_the_canary_with_its_weight():
    manager = deployments()
    production, canary = served(), served(model_version="digits:3", replicas=1, run_dir=STORAGE / "r3")
    manifest = manager.build_inference_service_manifest(production, canary, 20)
    assert manifest["apiVersion"] == "serving.kserve.io/v1beta1" and manifest["kind"] == "InferenceService"
    assert manifest["metadata"]["name"] == "kpl-digits"
    assert manifest["metadata"]["annotations"] == {"kpl-lab.io/model-version": "digits:3"}
    predictor = manifest["spec"]["predictor"]
    assert predictor["canaryTrafficPercent"] == 20 and predictor["minReplicas"] == 1
    [container] = predictor["containers"]
    assert container["name"] == "kserve-container"
    assert "/kpl/inputs/model" in {m["mountPath"] for m in container["volumeMounts"]}
    plain = manager.build_inference_service_manifest(production)
    assert "canaryTrafficPercent" not in plain["spec"]["predictor"]
    assert plain["spec"]["predictor"]["minReplicas"] == 2


@pytest.mark.parametrize(
    ("status", "generation", "state", "ready"),
    [
        ("deployment_status_available.json", 1, "ready", 2),
        ("deployment_status_available.json", 2, "degraded", 2),  # a change the controller has not seen yet
        ("deployment_status_progressing.json", 1, "degraded", 1),
        ("deployment_status_deadline_exceeded.json", 1, "failed", 0),
    ],
)
def test_deployment_state_from_recorded_statuses(status, generation, state, ready):
    found = {"metadata": {"generation": generation}, "spec": {"replicas": 2}, "status": fixture(status)}
    result = deployment_state(found)
    assert result["state"] == state and result["ready"] == ready and result["replicas"] == 2
    if state == "failed":
        assert "timed out progressing" in result["reason"]


def test_a_new_deployment_with_no_status_is_starting():
    found = {"metadata": {"generation": 1}, "spec": {"replicas": 1}, "status": {}}
    assert deployment_state(found)["state"] == "starting"


# -- API calls against the double ---------------------------------------------------------


@pytest.fixture
async def double():
    server = K8sDouble()
    await server.start()
    yield server
    await server.close()


def live(double: K8sDouble, tmp_path: Path, root: Path, **config) -> KubernetesDeployments:
    return KubernetesDeployments(
        KubernetesExecutor(
            kubeconfig=str(double.kubeconfig(tmp_path / "kubeconfig")),
            storage_root=str(root),
            run_as_user=None,
            **config,
        )
    )


async def test_apply_creates_the_deployment_and_its_service(double, tmp_path):
    root = tmp_path / "storage"
    manager, version = live(double, tmp_path, root), served(root)

    created = await manager.apply(version)

    name = version.name
    [post] = double.sent("POST", "/apis/apps/v1/namespaces/kpl-demo/deployments")
    assert post.body == manager.build_deployment_manifest(version)
    assert post.headers["Authorization"] == "Bearer double-token"
    [service_post] = double.sent("POST", "/api/v1/namespaces/kpl-demo/services")
    assert service_post.body == manager.build_service_manifest(version)
    assert created["metadata"]["uid"] == double.deployments[(NS, name)]["metadata"]["uid"]
    assert created["spec"]["progressDeadlineSeconds"] == 600  # the server's defaults come back
    assert double.services[(NS, name)]["spec"]["clusterIP"].startswith("10.96.")
    assert yaml.safe_load((version.run_dir / "parameter.yml").read_text()) == {"threshold": 0.5}

    assert (await manager.status(version.project, version.name))["state"] == "starting"
    double.set_deployment_status(NS, name, fixture("deployment_status_available.json"))
    assert (await manager.status(version.project, version.name)) == {
        "state": "ready",
        "ready": 2,
        "replicas": 2,
        "reason": "",
    }


async def test_apply_again_patches_the_existing_deployment(double, tmp_path):
    root = tmp_path / "storage"
    manager = live(double, tmp_path, root)
    await manager.apply(served(root))
    version = served(root, image="registry.example.com/kpl/pytorch:2.4-cuda12")

    patched = await manager.apply(version)

    [patch] = double.sent("PATCH", f"/deployments/{version.name}")
    assert patch.headers["Content-Type"] == "application/strategic-merge-patch+json"
    assert patch.body == {"spec": manager.build_deployment_manifest(version)["spec"]}
    assert patched["metadata"]["generation"] == 2
    assert patched["spec"]["template"]["spec"]["containers"][0]["image"].endswith("2.4-cuda12")
    assert len(double.services) == 1


async def test_scale_patches_the_replicas(double, tmp_path):
    root = tmp_path / "storage"
    manager, version = live(double, tmp_path, root), served(root)
    await manager.apply(version)
    double.set_deployment_status(NS, version.name, fixture("deployment_status_available.json"))

    scaled = await manager.scale(version.project, version.name, 3)

    [patch] = double.sent("PATCH", f"/deployments/{version.name}")
    assert patch.body == {"spec": {"replicas": 3}}
    assert scaled["spec"]["replicas"] == 3
    status = await manager.status(version.project, version.name)
    assert status["state"] == "degraded" and status["reason"].startswith("2 of 3 replicas ready")


async def test_delete_removes_deployment_and_service_and_tolerates_missing_ones(double, tmp_path):
    root = tmp_path / "storage"
    manager, version = live(double, tmp_path, root), served(root)
    await manager.apply(version)

    await manager.delete(version.project, version.name)
    await manager.delete(version.project, version.name)  # already gone: nothing to do

    assert not double.deployments and not double.services
    deletes = double.sent("DELETE")
    assert [r.path.rsplit("/", 2)[-2] for r in deletes] == ["deployments", "services"] * 2
    assert deletes[0].query["propagationPolicy"] == "Foreground"
    assert (await manager.status(version.project, version.name))["state"] == "stopped"


async def test_canary_is_a_second_deployment_beside_production(double, tmp_path):
    root = tmp_path / "storage"
    manager = live(double, tmp_path, root)
    production = served(root)
    canary = served(root, model_version="digits:3", replicas=1, run_dir=root / "projects/demo/deployments/c")

    await manager.apply(production)
    await manager.apply(canary)

    assert len(double.deployments) == 2 and len(double.services) == 2
    selectors = {s["spec"]["selector"]["kpl-lab.io/model-version"] for s in double.services.values()}
    assert len(selectors) == 2
    await manager.delete(
        production.project, production.name
    )  # promote's last step: the old version goes, the canary stays
    assert list(double.deployments) == [(NS, canary.name)]


async def test_rbac_refusal_names_the_role(double, tmp_path):
    root = tmp_path / "storage"
    manager = live(double, tmp_path, root)
    double.fail(
        "POST", "/apis/apps/v1/namespaces/kpl-demo/deployments", 403, fixture("status_forbidden_rbac.json")
    )
    with pytest.raises(Forbidden, match="docs/kubernetes.md"):
        await manager.apply(served(root))
    assert not double.services


# -- DeploymentService with the Kubernetes replica backend ----------------------------------


@pytest.fixture
def cluster(tmp_path):
    """Run the double on its own event loop: the service's calls block the test's thread."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = K8sDouble()
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(10)
    yield server
    asyncio.run_coroutine_threadsafe(server.close(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


@pytest.fixture
def on_kubernetes(serving_platform, cluster, tmp_path):
    """Return the serving platform with replicas on the double's cluster."""
    config = serving_platform.config
    config.DeploymentService.replica_backend = "kubernetes"
    config.KubernetesExecutor.kubeconfig = str(cluster.kubeconfig(tmp_path / "kubeconfig"))
    config.KubernetesExecutor.storage_root = str(serving_platform.storage.root)
    config.KubernetesExecutor.default_image = "registry.example.com/kpl/serve:1"
    config.KubernetesExecutor.run_as_user = None
    serving_platform.deployments.update_config(config)
    return serving_platform


def reservations(platform) -> list[Reservation]:
    with platform.session() as session:
        return list(session.scalars(select(Reservation).where(Reservation.owner_kind == "deployment")))


def test_create_canary_promote_and_delete_drive_deployments_and_services(on_kubernetes, cluster, toy):
    platform, service = on_kubernetes, on_kubernetes.deployments
    production, canary = toy("cat"), toy("dog")

    service.create("default", "pets", production, replica_count=2, algorithm="toy-serve")

    # the first replica creates the Deployment; the second finds it (409) and patches it to 2
    posts = cluster.sent("POST", "/apis/apps/v1/namespaces/kpl-default/deployments")
    assert [post.body["spec"]["replicas"] for post in posts] == [1, 2]
    [patch] = cluster.sent("PATCH")
    assert patch.body["spec"]["replicas"] == 2
    [(namespace, name)] = cluster.deployments
    template = cluster.deployments[(namespace, name)]["spec"]["template"]
    assert template["spec"]["containers"][0]["image"] == "registry.example.com/kpl/serve:1"
    assert template["metadata"]["annotations"]["kpl-lab.io/model-version"] == production
    assert list(cluster.services) == [(namespace, name)]
    assert [r.cpu for r in reservations(platform)] == [0.5, 0.5]
    routing = service.routing("default", "pets")
    assert routing.state == "starting" and not routing.ready

    cluster.set_deployment_status(namespace, name, fixture("deployment_status_available.json"))
    routing = service.routing("default", "pets")
    assert routing.state == "ready"
    assert routing.ready == {production: [f"http://{name}.kpl-default.svc:80"] * 2}

    service.canary("default", "pets", canary, 20, algorithm="toy-serve", replica_count=2)
    assert len(cluster.deployments) == 2 and len(cluster.services) == 2
    [canary_name] = [n for _, n in cluster.deployments if n != name]
    assert service.state(service.get("default", "pets"))[0] == "degraded"  # the canary is not ready yet
    cluster.set_deployment_status(namespace, canary_name, fixture("deployment_status_available.json"))

    service.promote("default", "pets", timeout=10)

    assert list(cluster.deployments) == [(namespace, canary_name)]
    assert list(cluster.services) == [(namespace, canary_name)]
    routing = service.routing("default", "pets")
    assert routing.production == canary and list(routing.ready) == [canary]

    service.delete("default", "pets")
    assert not cluster.deployments and not cluster.services
    assert reservations(platform) == []


def test_a_deployment_past_its_progress_deadline_fails_with_the_reason(on_kubernetes, cluster, toy):
    service = on_kubernetes.deployments
    service.create("default", "pets", toy("cat"), algorithm="toy-serve")
    [(namespace, name)] = cluster.deployments
    cluster.set_deployment_status(namespace, name, fixture("deployment_status_deadline_exceeded.json"))

    state, reason = service.state(service.get("default", "pets"))

    assert state == "failed" and "timed out progressing" in reason
    with pytest.raises(Unavailable, match="timed out progressing"):
        service.wait("default", "pets", timeout=5)
    assert service.reconcile() == []  # Kubernetes restarts its own pods


def test_show_lists_pod_replicas_and_an_api_failure_is_a_502(on_kubernetes, cluster, toy):
    service = on_kubernetes.deployments
    model = toy("cat")
    service.create("default", "pets", model, replica_count=2, algorithm="toy-serve")
    [(namespace, name)] = cluster.deployments
    cluster.set_deployment_status(namespace, name, fixture("deployment_status_progressing.json"))

    shown = deployment_model(service, service.get("default", "pets"))

    assert shown.state == "degraded" and shown.reason.startswith("replica ")
    assert sorted(r.state for r in shown.replica_states) == ["ready", "starting"]
    assert all(r.port is None for r in shown.replica_states)
    assert shown.metrics[model].requests == 0  # counters of pods are not collected
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}"
    cluster.fail("GET", path, 500, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 500})
    with pytest.raises(KubernetesAPIError) as refused:
        service.routing("default", "pets")
    assert refused.value.status == 502


def _replica_pod(deployment: dict, name: str, created: str) -> dict:
    """Return a pod of a Deployment as its ReplicaSet makes it: the template's labels and a hash."""
    template = deployment["spec"]["template"]
    labels = {**template["metadata"]["labels"], "pod-template-hash": "6d4cf56db6"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": deployment["metadata"]["namespace"],
            "labels": labels,
            "creationTimestamp": created,
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": name.rsplit("-", 1)[0],
                    "uid": "7c1d5e0a-3b7f-4c8e-9a51-6e2f0d4b8c37",
                    "controller": True,
                }
            ],
        },
        "spec": copy.deepcopy(template["spec"]),
        "status": {"phase": "Running"},
    }


def test_logs_are_each_pods_last_lines_and_only_its_versions(on_kubernetes, cluster, toy):
    service = on_kubernetes.deployments
    production, canary = toy("cat"), toy("dog")
    service.create("default", "pets", production, replica_count=2, algorithm="toy-serve")
    service.canary("default", "pets", canary, 20, algorithm="toy-serve")
    names = {
        cluster.deployments[key]["spec"]["template"]["metadata"]["annotations"][
            "kpl-lab.io/model-version"
        ]: key
        for key in cluster.deployments
    }
    (namespace, name), (_, canary_name) = names[production], names[canary]
    made = cluster.deployments[(namespace, name)]
    for pod, created in (
        (f"{name}-6d4cf56db6-a9q", "2026-11-28T10:00:05Z"),
        (f"{name}-6d4cf56db6-b2x", "2026-11-28T10:00:01Z"),
    ):
        cluster.add_pod(_replica_pod(made, pod, created))
        cluster.logs[(namespace, pod)] = "".join(f"{pod} line {i}\n" for i in range(5))
    other = _replica_pod(
        cluster.deployments[(namespace, canary_name)], f"{canary_name}-7f9-k1", "2026-11-28T10:01:00Z"
    )
    cluster.add_pod(other)
    cluster.logs[(namespace, other["metadata"]["name"])] = "canary started\n"

    found = service.logs("default", "pets", lines=2)

    first, second = f"{name}-6d4cf56db6-b2x", f"{name}-6d4cf56db6-a9q"  # oldest first
    assert [entry for entry in found if entry["model_version"] == production] == [
        {"replica": first, "model_version": production, "text": f"{first} line 3\n{first} line 4\n"},
        {"replica": second, "model_version": production, "text": f"{second} line 3\n{second} line 4\n"},
    ]
    assert [entry for entry in found if entry["model_version"] == canary] == [
        {"replica": other["metadata"]["name"], "model_version": canary, "text": "canary started\n"}
    ]
    selectors = [read.query["labelSelector"] for read in cluster.sent("GET", "/pods")]
    assert selectors and all("kpl-lab.io/model-version=" in s for s in selectors)  # a version's own pods

    service.delete("default", "pets")
    with pytest.raises(NotFound):
        service.logs("default", "pets")
