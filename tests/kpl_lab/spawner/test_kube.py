"""The Kubernetes spawner on generated manifests (no cluster): profiles to pods, namespace, quota."""

from __future__ import annotations

import asyncio

import pytest
from kubernetes_asyncio.client.rest import ApiException
from kubernetes_asyncio.config import kube_config
from kubespawner import KubeSpawner
from tornado import web
from traitlets.config import Config

from kpl_lab.spawner.kube import KPLKubeSpawner, resource_quota_manifest

from .conftest import PROFILES, Group, make_user

KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: none, user: {token: none}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
"""

KUBE_PROFILES = [
    *PROFILES,
    {
        "slug": "ascend",
        "environment": "registry.example/kpl/mindspore:2.3",
        "cpu": 4,
        "memory": 8192,
        "shm": 1024,
        "shm_max": 4096,
        "accelerator": "npu",
        "accelerators": 1,
        "accelerators_max": 8,
        "node_selector": {"accelerator": "ascend-910b"},
        "tolerations": [{"key": "huawei.com/Ascend910", "operator": "Exists", "effect": "NoSchedule"}],
    },
]


@pytest.fixture
def make_kube(tmp_path, monkeypatch):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    # read from the environment when kubernetes_asyncio was imported: point it at the dummy too
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig))
    config = Config(
        {
            "KPLSpawner": {"profiles": KUBE_PROFILES},
            "KubeSpawner": {"image": "registry.example/kpl/lab:1", "tolerations": [{"key": "base"}]},
        }
    )

    def make(user, options) -> KPLKubeSpawner:
        spawner = KPLKubeSpawner(_mock=True, user=user, config=config)
        spawner.user_options = options
        return spawner

    return make


def container(pod):
    return pod.spec.containers[0]


async def test_gpu_profile_becomes_pod_resources_in_the_project_namespace(make_kube):
    spawner = make_kube(
        make_user("alice", Group("vision")), {"profile": "gpu", "accelerators": 2, "memory": 4096}
    )
    await spawner.load_user_options()
    pod = await spawner.get_pod_manifest()
    resources = container(pod).resources
    assert resources.limits["nvidia.com/gpu"] == "2"
    assert resources.requests["nvidia.com/gpu"] == "2"
    assert int(resources.limits["memory"]) == 4096 * 1024 * 1024
    assert float(resources.limits["cpu"]) == 2.0
    assert spawner.namespace == "kpl-vision"
    assert pod.spec.containers[0].image == "registry.example/kpl/lab:1"
    env = {e.name: e.value for e in container(pod).env}
    assert env["KPL_PROJECT"] == "vision" and env["KPL_PROFILE"] == "gpu"
    assert spawner.user_options["profile"] == "gpu"


async def test_npu_profile_image_shm_node_selector_tolerations(make_kube):
    spawner = make_kube(make_user("bob", Group("Big_Models")), {"profile": "ascend", "shm": 2048})
    await spawner.load_user_options()
    pod = await spawner.get_pod_manifest()
    assert container(pod).image == "registry.example/kpl/mindspore:2.3"
    assert container(pod).resources.limits["huawei.com/Ascend910"] == "1"
    shm = next(v for v in pod.spec.volumes if v.name == "kpl-dshm")
    assert shm.empty_dir == {"medium": "Memory", "sizeLimit": "2048Mi"}  # nested as written, camelCase
    assert any(m.mount_path == "/dev/shm" and m.name == "kpl-dshm" for m in container(pod).volume_mounts)
    assert pod.spec.node_selector == {"accelerator": "ascend-910b"}
    keys = [t.key for t in pod.spec.tolerations]
    assert "base" in keys and "huawei.com/Ascend910" in keys
    assert spawner.namespace == "kpl-big-models"


async def test_shared_gpu_profile_asks_the_time_sliced_resource(make_kube):
    spawner = make_kube(make_user("carol", Group("nlp")), {"profile": "shared"})
    await spawner.load_user_options()
    pod = await spawner.get_pod_manifest()
    assert container(pod).resources.limits["nvidia.com/gpu.shared"] == "1"
    assert "nvidia.com/gpu" not in container(pod).resources.limits


async def test_nothing_leaks_into_the_next_spawn(make_kube):
    spawner = make_kube(make_user("bob", Group("vision")), {"profile": "ascend"})
    await spawner.load_user_options()
    spawner.user_options = {"profile": "cpu"}
    await spawner.load_user_options()
    pod = await spawner.get_pod_manifest()
    limits = container(pod).resources.limits
    assert "huawei.com/Ascend910" not in limits
    assert [v.empty_dir["sizeLimit"] for v in pod.spec.volumes if v.name == "kpl-dshm"] == ["64Mi"]
    assert not pod.spec.node_selector
    assert [t.key for t in pod.spec.tolerations if t.key in ("base", "huawei.com/Ascend910")] == ["base"]
    assert container(pod).image == "registry.example/kpl/lab:1"


@pytest.mark.parametrize(
    ("options", "status", "message"),
    [
        ({"profile": "gpu", "project": "nlp"}, 400, "profile 'gpu' is not available to project 'nlp'"),
        (
            {"profile": "ascend", "accelerators": 9},
            400,
            "accelerators 9 is over the maximum 8 of profile 'ascend'",
        ),
        ({"profile": "ascend", "accelerators": 4}, 403, "asks 4 NPUs; project nlp allows 2"),
    ],
)
async def test_same_validation_as_the_local_spawner(make_kube, options, status, message):
    spawner = make_kube(make_user("eve", Group("nlp", {"kpl_quota": {"npu": 2}})), options)
    with pytest.raises(web.HTTPError) as caught:
        await spawner.load_user_options()
    assert caught.value.status_code == status
    assert caught.value.jupyterhub_message.startswith(message)


def test_resource_quota_manifest():
    manifest = resource_quota_manifest(
        "vision", {"cpu": 8, "memory": 16384, "gpu": 2, "npu": 0, "notebooks": 3}, "kpl-vision"
    )
    assert manifest["kind"] == "ResourceQuota"
    assert manifest["metadata"]["namespace"] == "kpl-vision"
    assert manifest["spec"]["hard"] == {
        "limits.cpu": "8",
        "limits.memory": "16384Mi",
        "requests.nvidia.com/gpu": "2",
        "requests.huawei.com/Ascend910": "0",
        "pods": "3",
    }
    assert resource_quota_manifest("x", {}, "kpl-x")["spec"]["hard"] == {}


class FakeCoreApi:
    """Records the ResourceQuota calls; the first create of a namespace's quota conflicts when it exists."""

    def __init__(self, existing=()):
        self.existing, self.calls = set(existing), []

    async def create_namespaced_resource_quota(self, namespace, body):
        self.calls.append(("create", namespace, body["spec"]["hard"]))
        if namespace in self.existing:
            raise ApiException(status=409)
        self.existing.add(namespace)

    async def replace_namespaced_resource_quota(self, name, namespace, body):
        self.calls.append(("replace", namespace, body["spec"]["hard"]))


async def test_the_choice_is_kubespawners_only_profile(make_kube):
    spawner = make_kube(make_user("alice", Group("vision")), {"profile": "gpu"})
    assert spawner.profile_list(spawner) == []
    await spawner.load_user_options()
    [profile] = spawner.profile_list(spawner)
    assert profile["slug"] == "gpu" and profile["default"]
    assert profile["kubespawner_override"]["namespace"] == "kpl-vision"
    assert profile["kubespawner_override"]["extra_resource_limits"] == {"nvidia.com/gpu": "1"}


async def test_modify_pod_hook_writes_the_project_quota(make_kube):
    spawner = make_kube(make_user("alice", Group("vision", {"kpl_quota": {"gpu": 2}})), {"profile": "gpu"})
    spawner.api = FakeCoreApi(existing={"kpl-vision"})
    await spawner.load_user_options()
    pod = await spawner.get_pod_manifest()
    assert await spawner.modify_pod_hook(spawner, pod) is pod
    assert spawner.api.calls == [
        ("create", "kpl-vision", {"requests.nvidia.com/gpu": "2"}),
        ("replace", "kpl-vision", {"requests.nvidia.com/gpu": "2"}),
    ]
    spawner.manage_resource_quota = False
    spawner.api.calls.clear()
    await spawner.modify_pod_hook(spawner, pod)
    assert spawner.api.calls == []


async def test_a_pod_refused_by_the_cluster_quota_names_the_project(make_kube, monkeypatch):
    spawner = make_kube(make_user("alice", Group("vision")), {"profile": "cpu"})

    async def refused(self):
        await self.load_user_options()
        error = ApiException(status=403, reason="Forbidden")
        error.body = '{"message": "pods \\"x\\" is forbidden: exceeded quota: kpl-quota"}'
        raise error

    monkeypatch.setattr(KubeSpawner, "start", lambda self: asyncio.ensure_future(refused(self)))
    with pytest.raises(web.HTTPError) as caught:
        await spawner.start()
    assert caught.value.status_code == 403
    assert caught.value.jupyterhub_message == "project vision: the cluster quota of kpl-vision is used up"


async def test_pods_run_non_root_and_mount_only_their_project(make_kube):
    spawner = make_kube(make_user("alice", Group("vision")), {"profile": "cpu"})
    spawner.project_storage = {"persistentVolumeClaim": {"claimName": "kpl-storage"}}
    await spawner.load_user_options()
    pod = await spawner.get_pod_manifest()
    security = container(pod).security_context  # a dict, camelCase, as KubeSpawner merges it
    assert (security["runAsUser"], security["runAsGroup"]) == (1000, 100)
    assert security["runAsNonRoot"] is True and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert pod.spec.security_context["fsGroup"] == 100
    [mount] = [m for m in container(pod).volume_mounts if m.name == "kpl-project"]
    assert (mount.mount_path, mount.sub_path) == ("/home/jovyan/project", "projects/vision")
    [volume] = [v for v in pod.spec.volumes if v.name == "kpl-project"]
    assert volume.persistent_volume_claim == {"claimName": "kpl-storage"}
