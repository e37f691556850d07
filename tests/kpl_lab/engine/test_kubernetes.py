"""KubernetesExecutor: Job manifests, and the lifecycle against a Kubernetes API double."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import re
import sys
from pathlib import Path

import pytest
import yaml

from kpl_lab.engine.kubernetes import (
    KubernetesAPIError,
    KubernetesExecutor,
    KubernetesQuotaError,
    dns_label,
    job_name,
    label_value,
)
from kpl_lab.engine.launch import JobLaunch, Resources
from kpl_lab.errors import BadRequest, Forbidden


def _load_double():
    # Loaded by path: works with pytest's prepend and importlib import modes alike.
    path = Path(__file__).with_name("k8s_double.py")
    spec = importlib.util.spec_from_file_location("kpl_tests_k8s_double", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


_double = _load_double()
K8sDouble, fixture = _double.K8sDouble, _double.fixture

NS = "kpl-demo"
NAME = "kpl-job-42"
JOBS = f"/apis/batch/v1/namespaces/{NS}/jobs"
SECRETS = f"/api/v1/namespaces/{NS}/secrets"
STORAGE = Path("/srv/kpl")


def make_launch(root: Path = STORAGE, **changes) -> JobLaunch:
    project_dir = root / "projects" / "demo"
    values = dict(
        job_id="42",
        project="demo",
        function="train",
        cmd="python train.py --epochs 3",
        algorithm_dir=project_dir / "algorithms" / "resnet" / "ab12cd",
        run_dir=project_dir / "jobs" / "42",
        image="registry.example.com/kpl/pytorch:2.3-cuda12",
        parameters={"lr": 0.01, "epochs": 3},
        limits=Resources(cpu=2, memory=4096, shm=0),
    )
    values.update(changes)
    return JobLaunch(**values)


def make_executor(**config) -> KubernetesExecutor:
    config.setdefault("storage_root", str(STORAGE))
    return KubernetesExecutor(**config)


def container(manifest: dict) -> dict:
    return manifest["spec"]["template"]["spec"]["containers"][0]


def env(manifest: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(manifest)["env"]}


def mounts(manifest: dict) -> dict:
    return {m["mountPath"]: m for m in container(manifest)["volumeMounts"]}


# -- manifests ---------------------------------------------------------------------------


def test_cpu_only_manifest():
    launch = make_launch(
        limits=Resources(cpu=1.5, memory=3000, shm=0), requests=Resources(cpu=0.25, memory=512)
    )
    manifest = make_executor().build_job_manifest(launch)

    assert manifest["apiVersion"] == "batch/v1" and manifest["kind"] == "Job"
    assert manifest["metadata"]["name"] == NAME
    assert manifest["metadata"]["namespace"] == NS
    assert manifest["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "kpl-lab",
        "app.kubernetes.io/component": "job",
        "kpl-lab.io/job-id": "42",
        "kpl-lab.io/project": "demo",
    }
    spec = manifest["spec"]
    assert spec["backoffLimit"] == 0
    assert spec["ttlSecondsAfterFinished"] == 3600
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 1000
    assert "nodeSelector" not in pod and "tolerations" not in pod
    c = container(manifest)
    assert c["image"] == "registry.example.com/kpl/pytorch:2.3-cuda12"
    assert c["command"] == ["/bin/sh", "-c", "python train.py --epochs 3"]
    assert c["workingDir"] == "/kpl/algorithm"
    assert c["resources"] == {
        "limits": {"cpu": "1500m", "memory": "3000Mi"},
        "requests": {"cpu": "250m", "memory": "512Mi"},
    }
    variables = env(manifest)
    assert variables["KPL_INNER"] == "1"
    assert variables["KPL_ENV"] == "job"
    assert variables["KPL_ENV_TASK_ID"] == "42"
    assert variables["KPL_ENV_FUNCTION"] == "train"
    assert json.loads(variables["KPL_ENV_PARAMETER"]) == {"lr": 0.01, "epochs": 3}
    assert variables["CUDA_VISIBLE_DEVICES"] == "" and variables["ASCEND_RT_VISIBLE_DEVICES"] == ""
    # No events URL configured: events go to the run folder on the shared PVC.
    assert variables["KPL_EVENTS_FILE"] == "/kpl/run/events.jsonl"
    assert "KPL_EVENTS_URL" not in variables and "KPL_JOB_TOKEN" not in variables
    assert "/dev/shm" not in mounts(manifest)
    assert [v["name"] for v in pod["volumes"]] == ["kpl-storage"]


def test_gpu_manifest_uses_extended_resource_with_selectors_and_tolerations():
    executor = make_executor(
        device_node_selectors={"gpu": {"nvidia.com/gpu.present": "true"}},
        device_tolerations={"gpu": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
        node_selector={"kpl-lab.io/pool": "jobs"},
    )
    launch = make_launch(
        limits=Resources(cpu=4, memory=16384, shm=0, devices={"gpu": 2, "npu": 0}),
        requests=Resources(cpu=2, memory=8192, devices={"gpu": 1}),
    )
    manifest = executor.build_job_manifest(launch)
    resources = container(manifest)["resources"]
    # Extended resources cannot be overcommitted: requests follow the limits.
    assert resources["limits"]["nvidia.com/gpu"] == "2"
    assert resources["requests"]["nvidia.com/gpu"] == "2"
    assert resources["requests"]["cpu"] == "2000m"
    assert "huawei.com/Ascend910" not in resources["limits"]
    pod = manifest["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kpl-lab.io/pool": "jobs", "nvidia.com/gpu.present": "true"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    variables = env(manifest)
    # The device plugin chooses the GPUs; only the absent kind is hidden.
    assert "CUDA_VISIBLE_DEVICES" not in variables
    assert variables["ASCEND_RT_VISIBLE_DEVICES"] == ""


def test_npu_manifest():
    executor = make_executor(device_node_selectors={"npu": {"accelerator": "huawei-Ascend910"}})
    manifest = executor.build_job_manifest(
        make_launch(limits=Resources(cpu=8, memory=32768, shm=0, devices={"npu": 4}))
    )
    resources = container(manifest)["resources"]
    assert resources["limits"]["huawei.com/Ascend910"] == "4"
    assert resources["requests"]["huawei.com/Ascend910"] == "4"
    assert manifest["spec"]["template"]["spec"]["nodeSelector"] == {"accelerator": "huawei-Ascend910"}
    variables = env(manifest)
    assert "ASCEND_RT_VISIBLE_DEVICES" not in variables and variables["CUDA_VISIBLE_DEVICES"] == ""


def test_unknown_device_kind_is_refused_by_name():
    with pytest.raises(BadRequest, match=r"asks for 1 tpu.*known: gpu, npu"):
        make_executor().build_job_manifest(make_launch(limits=Resources(devices={"tpu": 1})))


def test_shm_is_a_memory_empty_dir_at_dev_shm():
    manifest = make_executor().build_job_manifest(make_launch(limits=Resources(cpu=1, memory=2048, shm=512)))
    volumes = {v["name"]: v for v in manifest["spec"]["template"]["spec"]["volumes"]}
    assert volumes["dshm"] == {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "512Mi"}}
    assert mounts(manifest)["/dev/shm"] == {"name": "dshm", "mountPath": "/dev/shm"}


def test_inputs_read_only_and_outputs_writable_on_the_storage_pvc():
    project = STORAGE / "projects" / "demo"
    launch = make_launch(
        inputs={
            "train": project / "datasets" / "voc" / "v3",
            "checkpoint": project / "models" / "resnet" / "v1",
        },
        outputs=["model", "report"],
    )
    manifest = make_executor(storage_pvc="shared-data").build_job_manifest(launch)
    volumes = manifest["spec"]["template"]["spec"]["volumes"]
    assert volumes[0] == {"name": "kpl-storage", "persistentVolumeClaim": {"claimName": "shared-data"}}
    m = mounts(manifest)
    assert m["/kpl/inputs/train"] == {
        "name": "kpl-storage",
        "mountPath": "/kpl/inputs/train",
        "readOnly": True,
        "subPath": "projects/demo/datasets/voc/v3",
    }
    assert m["/kpl/inputs/checkpoint"]["subPath"] == "projects/demo/models/resnet/v1"
    assert m["/kpl/inputs/checkpoint"]["readOnly"] is True
    assert m["/kpl/outputs/model"]["subPath"] == "projects/demo/jobs/42/outputs/model"
    assert m["/kpl/outputs/model"]["readOnly"] is False
    assert m["/kpl/outputs/report"]["readOnly"] is False
    assert m["/kpl/algorithm"]["subPath"] == "projects/demo/algorithms/resnet/ab12cd"
    assert m["/kpl/algorithm"]["readOnly"] is True
    assert m["/kpl/run"]["readOnly"] is False
    variables = env(manifest)
    assert variables["KPL_ENV_INPUT_ROOT_PATH"] == "/kpl/inputs"
    assert variables["KPL_ENV_OUTPUT_ROOT_PATH"] == "/kpl/outputs"
    assert variables["KPL_PARAMETER_FILE"] == "/kpl/run/parameter.yml"
    assert variables["KPL_RUN_DIR"] == "/kpl/run"


def test_path_outside_the_storage_is_refused_with_its_name():
    launch = make_launch(inputs={"train": Path("/home/alice/voc")})
    with pytest.raises(BadRequest, match=r"input 'train' is at /home/alice/voc, outside the storage") as info:
        make_executor().build_job_manifest(launch)
    assert info.value.field == "input 'train'"
    sneaky = make_launch(inputs={"train": STORAGE / "projects" / ".." / ".." / "etc"})
    with pytest.raises(BadRequest, match="outside the storage"):
        make_executor().build_job_manifest(sneaky)


def test_input_key_must_be_a_plain_name():
    launch = make_launch(inputs={"../x": STORAGE / "projects" / "demo" / "datasets" / "a"})
    with pytest.raises(BadRequest, match=r"input key '\.\./x' is not a plain name"):
        make_executor().build_job_manifest(launch)


def test_names_with_odd_characters_become_dns_safe_and_stay_distinct():
    odd = make_launch(job_id="Job_42/Ünïcode.Run", project="Team Vision_2")
    manifest = make_executor().build_job_manifest(odd)
    name = manifest["metadata"]["name"]
    assert re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", name)
    assert name.startswith("kpl-job-job-42-")
    namespace = manifest["metadata"]["namespace"]
    assert re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", namespace)
    assert namespace.startswith("kpl-team-vision-2-")
    labels = manifest["metadata"]["labels"]
    for value in labels.values():
        assert re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?", value)
    # The exact id is kept where any text is allowed, for people reading the object.
    assert manifest["metadata"]["annotations"]["kpl-lab.io/job-id"] == "Job_42/Ünïcode.Run"
    assert env(manifest)["KPL_ENV_TASK_ID"] == "Job_42/Ünïcode.Run"
    # Two ids that sanitize alike do not collide; a long id still fits in 63 characters.
    assert job_name("a_b") != job_name("a-b")
    long_name = job_name("x" * 200)
    assert len(long_name) <= 63 and re.fullmatch(r"[a-z0-9-]+[a-z0-9]", long_name)
    assert dns_label("ok-name") == "ok-name"
    assert label_value("42") == "42" and len(label_value("-" + "y" * 80)) <= 63


def test_namespace_can_be_fixed_and_invalid_template_is_named():
    assert (
        make_executor(namespace="ml-jobs").build_job_manifest(make_launch())["metadata"]["namespace"]
        == "ml-jobs"
    )
    with pytest.raises(BadRequest, match="namespace 'KPL_demo'"):
        make_executor(namespace="KPL_{project}").build_job_manifest(make_launch())


def test_events_url_token_from_a_secret_never_in_plain_env():
    executor = make_executor(events_url="http://kpl-lab.kpl-system.svc:8888/kpl/api/jobs/{job_id}/events")
    manifest = executor.build_job_manifest(make_launch(env={"KPL_JOB_TOKEN": "s3cret", "EXTRA": "1"}))
    variables = env(manifest)
    assert variables["KPL_EVENTS_URL"] == "http://kpl-lab.kpl-system.svc:8888/kpl/api/jobs/42/events"
    assert variables["KPL_JOB_TOKEN"] == {"secretKeyRef": {"name": "kpl-job-42-token", "key": "token"}}
    assert variables["EXTRA"] == "1"
    assert "s3cret" not in json.dumps(manifest)
    assert "KPL_EVENTS_FILE" not in variables
    odd = executor.build_job_manifest(make_launch(job_id="a/b c"))
    assert env(odd)["KPL_EVENTS_URL"] == "http://kpl-lab.kpl-system.svc:8888/kpl/api/jobs/a%2Fb%20c/events"
    with pytest.raises(BadRequest, match=r"may only use \{job_id\} and \{project\}"):
        make_executor(events_url="http://kpl/{user}/events").build_job_manifest(make_launch())


def test_runs_are_expected_in_the_image_unless_run_in_pod():
    launch = make_launch(runs=["pip install -r requirements.txt", "python setup_data.py"])
    baked = make_executor().build_job_manifest(launch)
    assert container(baked)["command"][-1] == "python train.py --epochs 3"
    assert baked["metadata"]["annotations"]["kpl-lab.io/runs"] == "expected in the image"
    in_pod = make_executor(runs_in_pod=True).build_job_manifest(launch)
    assert container(in_pod)["command"][-1] == (
        "set -e\npip install -r requirements.txt\npython setup_data.py\npython train.py --epochs 3"
    )
    assert "kpl-lab.io/runs" not in in_pod["metadata"]["annotations"]


def test_missing_image_and_storage_root_are_named():
    with pytest.raises(BadRequest, match="no image.from_image and KubernetesExecutor.default_image"):
        make_executor().build_job_manifest(make_launch(image=None))
    assert (
        container(make_executor(default_image="python:3.11").build_job_manifest(make_launch(image=None)))[
            "image"
        ]
        == "python:3.11"
    )
    with pytest.raises(BadRequest, match="storage_root is not set"):
        KubernetesExecutor().build_job_manifest(make_launch())


def test_security_context_is_configurable():
    manifest = make_executor(
        run_as_user=None, run_as_group=None, fs_group=None, run_as_non_root=False
    ).build_job_manifest(make_launch())
    assert manifest["spec"]["template"]["spec"]["securityContext"] == {
        "seccompProfile": {"type": "RuntimeDefault"}
    }
    assert container(manifest)["securityContext"]["allowPrivilegeEscalation"] is False


def test_bad_resources_are_refused():
    with pytest.raises(BadRequest, match="memory > 0"):
        make_executor().build_job_manifest(make_launch(limits=Resources(cpu=1, memory=0)))


# -- lifecycle against the API double ----------------------------------------------------


@pytest.fixture
async def double():
    server = K8sDouble()
    await server.start()
    yield server
    await server.close()


@pytest.fixture
def storage(tmp_path) -> Path:
    root = tmp_path / "storage"
    (root / "projects" / "demo" / "algorithms" / "resnet" / "ab12cd").mkdir(parents=True)
    return root


def lifecycle_executor(double: K8sDouble, tmp_path: Path, storage: Path, **config) -> KubernetesExecutor:
    return KubernetesExecutor(
        kubeconfig=str(double.kubeconfig(tmp_path / "kubeconfig")),
        storage_root=str(storage),
        run_as_user=None,
        **config,
    )


async def test_execute_creates_secret_then_job_and_links_them(double, tmp_path, storage):
    executor = lifecycle_executor(
        double, tmp_path, storage, events_url="http://kpl:8888/api/jobs/{job_id}/events"
    )
    launch = make_launch(storage, outputs=["model"])
    await executor.before_start(launch)
    assert yaml.safe_load((launch.run_dir / "parameter.yml").read_text()) == {"lr": 0.01, "epochs": 3}
    assert (launch.run_dir / "outputs" / "model").is_dir()

    handle = await executor.execute(launch)

    job = double.jobs[(NS, NAME)]
    assert handle["namespace"] == NS and handle["name"] == NAME and handle["uid"] == job["metadata"]["uid"]
    [secret_post] = double.sent("POST", "/secrets")
    [job_post] = double.sent("POST", "/jobs")
    assert double.requests.index(secret_post) < double.requests.index(job_post)
    assert job_post.body == executor.build_job_manifest(launch)
    assert job_post.headers["Authorization"] == "Bearer double-token"
    token = secret_post.body["stringData"]["token"]
    assert handle["token_sha256"] == hashlib.sha256(token.encode()).hexdigest()
    [patch] = double.sent("PATCH", "/secrets/kpl-job-42-token")
    assert patch.headers["Content-Type"] == "application/strategic-merge-patch+json"
    owner = double.secrets[(NS, "kpl-job-42-token")]["metadata"]["ownerReferences"]
    assert owner == [{"apiVersion": "batch/v1", "kind": "Job", "name": NAME, "uid": handle["uid"]}]


async def test_poll_running_then_succeeded_keeps_the_log(double, tmp_path, storage):
    executor = lifecycle_executor(double, tmp_path, storage)
    launch = make_launch(storage)
    await executor.before_start(launch)
    handle = await executor.execute(launch)
    assert not double.sent("POST", "/secrets")  # no events URL: no token needed

    state = await executor.poll(launch, handle)
    assert state.running and state.reason is None  # created, no pod yet, no refusal event

    double.set_job_status(NS, NAME, fixture("job_status_running.json"))
    double.add_pod(fixture("pod_running.json"))
    state = await executor.poll(launch, handle)
    assert state.running and state.exit_code is None
    assert state.handle["pod"] == "kpl-job-42-x7k2p" and state.handle["node"] == "gpu-node-1"
    [pods] = double.sent("GET", "/pods")[-1:]
    assert pods.query["labelSelector"] == "kpl-lab.io/job-id=42"

    double.set_job_status(NS, NAME, fixture("job_status_succeeded.json"))
    double.pods[(NS, "kpl-job-42-x7k2p")] = {
        **double.pods[(NS, "kpl-job-42-x7k2p")],
        **fixture("pod_succeeded.json"),
    }
    double.logs[(NS, "kpl-job-42-x7k2p")] = "epoch 1 loss 0.9\nepoch 2 loss 0.5\nepoch 3 loss 0.3\n"
    state = await executor.poll(launch, handle)
    assert not state.running and state.exit_code == 0 and state.reason is None

    assert await executor.logs(launch, handle, tail_lines=1) == "epoch 3 loss 0.3\n"
    await executor.on_complete(launch, state)
    assert (launch.run_dir / "output.log").read_text().endswith("epoch 3 loss 0.3\n")
    assert double.sent("GET", "/pods/kpl-job-42-x7k2p/log")[-1].query["container"] == "job"
    assert (NS, NAME) in double.jobs  # a finished Job is left to ttlSecondsAfterFinished


async def test_oom_killed_pod_is_reported_as_memory_limit(double, tmp_path, storage):
    executor = lifecycle_executor(double, tmp_path, storage)
    launch = make_launch(storage, limits=Resources(cpu=2, memory=4096, shm=0))
    handle = await executor.execute(launch)
    double.set_job_status(NS, NAME, fixture("job_status_failed.json"))
    double.add_pod(fixture("pod_oomkilled.json"))

    state = await executor.poll(launch, handle)

    assert not state.running
    assert state.exit_code == 137
    assert state.reason == "exceeded its memory limit of 4096 MB"


async def test_plain_failure_gives_the_exit_code(double, tmp_path, storage):
    executor = lifecycle_executor(double, tmp_path, storage)
    launch = make_launch(storage)
    handle = await executor.execute(launch)
    double.set_job_status(NS, NAME, fixture("job_status_failed.json"))
    double.add_pod(fixture("pod_failed_exit.json"))
    state = await executor.poll(launch, handle)
    assert (state.running, state.exit_code, state.reason) == (False, 2, None)


async def test_image_pull_backoff_fails_naming_the_image_and_deletes_the_job(double, tmp_path, storage):
    executor = lifecycle_executor(double, tmp_path, storage)
    launch = make_launch(storage)
    await executor.before_start(launch)
    handle = await executor.execute(launch)
    double.add_pod(fixture("pod_image_pull_backoff.json"))

    state = await executor.poll(launch, handle)
    assert not state.running and state.exit_code is None
    assert state.reason.startswith("image registry.example.com/kpl/pytorch:2.3-cuda12 could not be pulled")
    assert "not found" in state.reason

    await executor.on_failure(launch, state)
    assert (NS, NAME) not in double.jobs
    assert double.sent("DELETE", f"/jobs/{NAME}")[0].query["propagationPolicy"] == "Foreground"


async def test_unschedulable_pod_keeps_running_with_the_scheduler_reason(double, tmp_path, storage):
    executor = lifecycle_executor(double, tmp_path, storage)
    launch = make_launch(storage)
    handle = await executor.execute(launch)
    double.add_pod(fixture("pod_unschedulable.json"))
    state = await executor.poll(launch, handle)
    assert state.running
    assert state.reason.startswith("not scheduled yet: 0/3 nodes are available")
    assert "Insufficient nvidia.com/gpu" in state.reason


async def test_quota_403_on_create_is_a_clear_quota_error_and_cleans_the_secret(double, tmp_path, storage):
    executor = lifecycle_executor(double, tmp_path, storage, events_url="http://kpl/api/jobs/{job_id}/events")
    double.fail("POST", JOBS, 403, fixture("status_quota_job.json"))
    with pytest.raises(KubernetesQuotaError) as info:
        await executor.execute(make_launch(storage))
    assert info.value.status == 403
    assert info.value.message == (
        "Kubernetes quota 'demo-objects' in namespace kpl-demo is full "
        "(count/jobs.batch: asks 1, 10 of 10 already used)"
    )
    assert double.secrets == {}  # the token Secret made for the refused Job is gone
    assert double.sent("DELETE", "/secrets/kpl-job-42-token")


async def test_rbac_403_names_the_missing_permission(double, tmp_path, storage):
    executor = lifecycle_executor(double, tmp_path, storage)
    double.fail("POST", JOBS, 403, fixture("status_forbidden_rbac.json"))
    with pytest.raises(Forbidden, match=r'cannot create resource "jobs".*docs/kubernetes.md') as info:
        await executor.execute(make_launch(storage))
    assert not isinstance(info.value, KubernetesQuotaError)


async def test_pod_refused_by_quota_fails_with_the_quota_sentence(double, tmp_path, storage):
    executor = lifecycle_executor(double, tmp_path, storage)
    launch = make_launch(storage)
    handle = await executor.execute(launch)
    double.add_event(fixture("event_failed_create_quota.json"))
    state = await executor.poll(launch, handle)
    assert not state.running and state.exit_code is None
    assert state.reason == (
        "Kubernetes quota 'demo-compute' in namespace kpl-demo is full "
        "(limits.memory: asks 4Gi, 14Gi of 16Gi already used; "
        "requests.nvidia.com/gpu: asks 1, 2 of 2 already used)"
    )
    [events] = double.sent("GET", "/events")
    assert events.query["fieldSelector"] == f"involvedObject.kind=Job,involvedObject.name={NAME}"


async def test_stop_deletes_job_and_pods_with_grace_then_poll_says_lost(double, tmp_path, storage):
    executor = lifecycle_executor(double, tmp_path, storage, events_url="http://kpl/api/jobs/{job_id}/events")
    launch = make_launch(storage)
    handle = await executor.execute(launch)
    double.set_job_status(NS, NAME, fixture("job_status_running.json"))
    double.add_pod(fixture("pod_running.json"))

    await executor.stop(launch, handle, grace_seconds=7)

    [delete] = double.sent("DELETE", f"/jobs/{NAME}")
    assert delete.query == {"propagationPolicy": "Foreground", "gracePeriodSeconds": "7"}
    [pod_delete] = double.sent("DELETE", "/pods/kpl-job-42-x7k2p")
    assert pod_delete.query == {"gracePeriodSeconds": "7"}
    assert double.jobs == {} and double.pods == {} and double.secrets == {}
    state = await executor.poll(launch, handle)
    assert not state.running and state.reason == f"lost: the Kubernetes Job {NS}/{NAME} no longer exists"
    await executor.stop(launch, handle)  # stopping twice is harmless


async def test_stop_keeps_the_pod_log_before_deleting(double, tmp_path, storage):
    executor = lifecycle_executor(double, tmp_path, storage)
    launch = make_launch(storage)
    await executor.before_start(launch)
    handle = await executor.execute(launch)
    double.add_pod(fixture("pod_running.json"))
    double.logs[(NS, "kpl-job-42-x7k2p")] = "step 1\nstep 2\n"
    await executor.stop(launch, handle, grace_seconds=0)
    assert (launch.run_dir / "output.log").read_text() == "step 1\nstep 2\n"
    state = await executor.poll(launch, handle)
    await executor.on_failure(launch, state)  # the pod is gone: the kept log stays
    assert (launch.run_dir / "output.log").read_text() == "step 1\nstep 2\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
async def test_before_start_gives_the_run_folder_to_the_job_user(tmp_path, storage):
    executor = KubernetesExecutor(storage_root=str(storage), run_as_user=1234, fs_group=2345)
    launch = make_launch(storage, outputs=["model"])
    await executor.before_start(launch)
    for path in (launch.run_dir, launch.run_dir / "outputs" / "model", launch.run_dir / "parameter.yml"):
        assert (path.stat().st_uid, path.stat().st_gid) == (1234, 2345)
    assert json.loads((launch.run_dir / "job.json").read_text())["job_id"] == "42"


async def test_attach_after_restart_finds_the_job_by_label(double, tmp_path, storage):
    events_url = "http://kpl/api/jobs/{job_id}/events"
    first = lifecycle_executor(double, tmp_path, storage, events_url=events_url)
    launch = make_launch(storage)
    handle = await first.execute(launch)
    double.set_job_status(NS, NAME, fixture("job_status_running.json"))
    double.add_pod(fixture("pod_running.json"))

    # A new server process knows only the launch (the stored handle may be missing).
    restarted = lifecycle_executor(double, tmp_path, storage, events_url=events_url)
    state = await restarted.attach(launch, {})
    assert state.running
    assert state.handle["name"] == NAME and state.handle["uid"] == handle["uid"]
    assert state.handle["token_sha256"] == handle["token_sha256"]
    assert double.sent("GET", JOBS)[-1].query["labelSelector"] == "kpl-lab.io/job-id=42"

    lost = await restarted.attach(make_launch(storage, job_id="43"), {})
    assert (
        not lost.running
        and lost.reason == f"lost: no Kubernetes Job labelled kpl-lab.io/job-id=43 in namespace {NS}"
    )


async def test_execute_twice_attaches_to_the_existing_job(double, tmp_path, storage):
    executor = lifecycle_executor(double, tmp_path, storage, events_url="http://kpl/api/jobs/{job_id}/events")
    launch = make_launch(storage)
    first = await executor.execute(launch)
    again = await executor.execute(launch)
    assert again["uid"] == first["uid"] and again["token_sha256"] == first["token_sha256"]
    assert len(double.jobs) == 1
    stored = double.secrets[(NS, "kpl-job-42-token")]["data"]["token"]
    assert hashlib.sha256(base64.b64decode(stored)).hexdigest() == first["token_sha256"]


async def test_a_foreign_job_with_the_same_name_is_not_adopted(double, tmp_path, storage):
    executor = lifecycle_executor(double, tmp_path, storage)
    other = executor.build_job_manifest(make_launch(storage))
    other["metadata"]["labels"] = {"app": "someone-else"}
    double.jobs[(NS, NAME)] = {**other, "metadata": {**other["metadata"], "uid": "u-1"}}
    with pytest.raises(KubernetesAPIError, match="a Job named kpl-job-42 that is not job 42 already exists"):
        await executor.execute(make_launch(storage))


async def test_unreachable_api_is_a_clear_error(tmp_path, storage):
    double = K8sDouble()
    await double.start()
    kubeconfig = double.kubeconfig(tmp_path / "kubeconfig")
    await double.close()  # nothing listens there any more
    executor = KubernetesExecutor(kubeconfig=str(kubeconfig), storage_root=str(storage))
    with pytest.raises(
        KubernetesAPIError, match=r"cannot reach the Kubernetes API at http://127\.0\.0\.1:\d+"
    ):
        await executor.poll(make_launch(storage), {"namespace": NS, "name": NAME})


# -- jobs of several workers -------------------------------------------------------------

PYTORCHJOBS = f"/apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs"


def worker_pod(base: str, rank: int, pytorchjob: bool = False) -> dict:
    """Return a recorded pod as the pod of one worker: of an indexed Job, or of a PyTorchJob."""
    pod = fixture(base)
    meta = pod["metadata"]
    if not pytorchjob:
        meta["name"] = f"{NAME}-{rank}-x7k2p"
        meta["annotations"]["batch.kubernetes.io/job-completion-index"] = str(rank)
        meta["labels"]["batch.kubernetes.io/job-completion-index"] = str(rank)
        return pod
    role = "master" if rank == 0 else "worker"
    meta["name"] = f"{NAME}-{role}-{max(0, rank - 1)}"
    meta["labels"] = {k: v for k, v in meta["labels"].items() if not k.endswith("job-name")}
    meta["labels"].update(
        {
            "training.kubeflow.org/job-name": NAME,
            "training.kubeflow.org/operator-name": "pytorchjob-controller",
            "training.kubeflow.org/replica-type": role,
            "training.kubeflow.org/replica-index": str(max(0, rank - 1)),
        }
    )
    meta["ownerReferences"] = [
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "name": NAME,
            "uid": "JOB_UID",
            "controller": True,
        }
    ]
    for item in (*pod["spec"]["containers"], *pod["status"].get("containerStatuses", [])):
        item["name"] = "pytorch"
    return pod


def test_several_workers_make_an_indexed_job_and_a_headless_service():
    launch = make_launch(limits=Resources(cpu=2, memory=4096, shm=0, devices={"gpu": 1}, workers=3))
    executor = make_executor()
    manifest = executor.build_job_manifest(launch)
    spec = manifest["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 3, 3)
    assert spec["backoffLimit"] == 0  # one failed worker fails the Job, which ends the others
    assert spec["template"]["spec"]["subdomain"] == NAME
    variables = env(manifest)
    assert variables["MASTER_ADDR"] == f"{NAME}-0.{NAME}" and variables["MASTER_PORT"] == "29500"
    assert (variables["WORLD_SIZE"], variables["LOCAL_RANK"], variables["LOCAL_WORLD_SIZE"]) == (
        "3",
        "0",
        "1",
    )
    assert variables["RANK"] == {
        "fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}
    }
    assert container(manifest)["resources"]["limits"]["nvidia.com/gpu"] == "1"  # each pod its share
    service = executor.build_service_manifest(launch)
    assert service["metadata"]["name"] == NAME and service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {"kpl-lab.io/job-id": "42"}
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["ports"] == [{"name": "rendezvous", "port": 29500, "targetPort": 29500}]
    one = executor.build_job_manifest(make_launch())
    assert "completionMode" not in one["spec"] and "MASTER_ADDR" not in env(one)


def test_several_workers_make_a_pytorchjob_of_a_master_and_workers():
    launch = make_launch(limits=Resources(cpu=2, memory=4096, shm=0, workers=3))
    manifest = make_executor(master_port=23456).build_pytorchjob_manifest(launch)
    assert (manifest["apiVersion"], manifest["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    assert manifest["metadata"]["name"] == NAME and manifest["metadata"]["namespace"] == NS
    assert manifest["spec"]["runPolicy"] == {
        "backoffLimit": 0,
        "ttlSecondsAfterFinished": 3600,
        "cleanPodPolicy": "Running",
    }
    replicas = manifest["spec"]["pytorchReplicaSpecs"]
    assert [(k, v["replicas"], v["restartPolicy"]) for k, v in replicas.items()] == [
        ("Master", 1, "Never"),
        ("Worker", 2, "Never"),
    ]
    pod = replicas["Worker"]["template"]
    assert pod["metadata"]["labels"]["kpl-lab.io/job-id"] == "42"
    [job_container] = pod["spec"]["containers"]
    assert job_container["name"] == "pytorch"  # the operator finds the container by this name
    assert job_container["ports"] == [{"name": "pytorchjob-port", "containerPort": 23456}]
    variables = {e["name"]: e.get("value") for e in job_container["env"]}
    assert variables["LOCAL_RANK"] == "0" and "MASTER_ADDR" not in variables  # the operator sets those
    assert replicas["Master"]["template"] == pod


async def test_indexed_job_without_the_training_operator(double, tmp_path, storage):
    executor = lifecycle_executor(double, tmp_path, storage, events_url="http://kpl/api/jobs/{job_id}/events")
    launch = make_launch(storage, limits=Resources(cpu=2, memory=4096, shm=0, workers=2))
    await executor.before_start(launch)
    handle = await executor.execute(launch)

    assert double.sent("GET", "/apis/kubeflow.org/v1")  # asked whether the cluster has the operator
    assert (handle["kind"], handle["workers"], handle["service"]) == ("Job", 2, NAME)
    [job_post] = double.sent("POST", "/jobs")
    assert job_post.body == executor.build_job_manifest(launch)
    assert double.jobs[(NS, NAME)]["spec"]["completionMode"] == "Indexed"
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": NAME, "uid": handle["uid"]}
    assert double.services[(NS, NAME)]["metadata"]["ownerReferences"] == [owner]
    assert double.secrets[(NS, "kpl-job-42-token")]["metadata"]["ownerReferences"] == [owner]

    double.set_job_status(NS, NAME, {**fixture("job_status_running.json"), "succeeded": 1})
    double.add_pod(worker_pod("pod_succeeded.json", 1))
    double.add_pod(worker_pod("pod_running.json", 0))
    state = await executor.poll(launch, handle)
    assert state.running  # worker 1 is done, worker 0 is not: the Job is not complete
    assert state.handle["pod"] == f"{NAME}-0-x7k2p"

    double.set_job_status(NS, NAME, fixture("job_status_failed.json"))
    double.pods[(NS, f"{NAME}-1-x7k2p")] = worker_pod("pod_failed_exit.json", 1) | {
        "metadata": double.pods[(NS, f"{NAME}-1-x7k2p")]["metadata"]
    }
    double.logs[(NS, f"{NAME}-0-x7k2p")] = "rank 0 step 1\n"
    double.logs[(NS, f"{NAME}-1-x7k2p")] = "rank 1 step 1\nRuntimeError: NCCL timeout\n"
    state = await executor.poll(launch, handle)
    assert (state.running, state.exit_code) == (False, 2)
    assert state.reason == "worker 1 exited with code 2: RuntimeError: NCCL timeout"

    await executor.on_failure(launch, state)
    assert (launch.run_dir / "output.log").read_text() == "rank 0 step 1\n"
    assert (launch.run_dir / "logs" / "worker-1.log").read_text().endswith("NCCL timeout\n")
    await executor.stop(launch, handle, grace_seconds=0)
    assert double.jobs == {} and double.services == {} and double.secrets == {}


async def test_a_kept_log_is_written_through_no_link_the_jobs_pods_put_in_the_run_folder(
    double, tmp_path, storage
):
    """The pods write the run folder as the job's user: `logs/` made a link leads the service nowhere."""
    executor = lifecycle_executor(double, tmp_path, storage)
    launch = make_launch(storage, limits=Resources(cpu=2, memory=4096, shm=0, workers=2))
    await executor.before_start(launch)
    handle = await executor.execute(launch)
    elsewhere = tmp_path / "elsewhere"  # a folder of the service's she wants a file made in
    elsewhere.mkdir()
    (launch.run_dir / "logs").symlink_to(elsewhere)
    double.set_job_status(NS, NAME, fixture("job_status_succeeded.json"))
    double.add_pod(worker_pod("pod_succeeded.json", 0))
    double.add_pod(worker_pod("pod_succeeded.json", 1))
    double.logs[(NS, f"{NAME}-0-x7k2p")] = "rank 0 done\n"
    double.logs[(NS, f"{NAME}-1-x7k2p")] = "rank 1 done\n"
    state = await executor.poll(launch, handle)
    assert (state.running, state.exit_code) == (False, 0)

    await executor.on_complete(launch, state)
    assert (launch.run_dir / "output.log").read_text() == "rank 0 done\n"
    assert list(elsewhere.iterdir()) == []  # worker 1's log is not kept, rather than kept there
    assert (launch.run_dir / "logs").is_symlink()


async def test_pytorchjob_with_the_training_operator(double, tmp_path, storage):
    double.training_operator = True
    executor = lifecycle_executor(double, tmp_path, storage, events_url="http://kpl/api/jobs/{job_id}/events")
    launch = make_launch(storage, limits=Resources(cpu=2, memory=4096, shm=0, workers=2))
    await executor.before_start(launch)
    handle = await executor.execute(launch)

    assert (handle["kind"], handle["workers"]) == ("PyTorchJob", 2) and "service" not in handle
    [post] = double.sent("POST", "/pytorchjobs")
    assert post.body == executor.build_pytorchjob_manifest(launch)
    assert not double.sent("POST", "/jobs") and not double.services
    owner = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": NAME, "uid": handle["uid"]}
    assert double.secrets[(NS, "kpl-job-42-token")]["metadata"]["ownerReferences"] == [owner]
    again = await executor.execute(launch)  # a second start attaches to it
    assert again["uid"] == handle["uid"] and len(double.pytorchjobs) == 1

    state = await executor.poll(launch, handle)
    assert state.running and state.handle["pod"] is None
    double.set_pytorchjob_status(NS, NAME, fixture("pytorchjob_status_running.json"))
    double.add_pod(worker_pod("pod_running.json", 0, pytorchjob=True))
    double.add_pod(worker_pod("pod_running.json", 1, pytorchjob=True))
    state = await executor.poll(launch, handle)
    assert state.running and state.handle["pod"] == f"{NAME}-master-0"

    # a restarted server finds it by its label
    restarted = lifecycle_executor(
        double, tmp_path, storage, events_url="http://kpl/api/jobs/{job_id}/events"
    )
    attached = await restarted.attach(launch, {})
    assert attached.running and attached.handle["kind"] == "PyTorchJob"
    assert attached.handle["uid"] == handle["uid"]
    assert double.sent("GET", PYTORCHJOBS)[-1].query["labelSelector"] == "kpl-lab.io/job-id=42"

    double.set_pytorchjob_status(NS, NAME, fixture("pytorchjob_status_succeeded.json"))
    double.logs[(NS, f"{NAME}-master-0")] = "epoch 3 loss 0.3\n"
    double.logs[(NS, f"{NAME}-worker-0")] = "worker epoch 3\n"
    state = await executor.poll(launch, handle)
    assert (state.running, state.exit_code, state.reason) == (False, 0, None)
    await executor.on_complete(launch, state)
    assert (launch.run_dir / "output.log").read_text() == "epoch 3 loss 0.3\n"
    assert (launch.run_dir / "logs" / "worker-1.log").read_text() == "worker epoch 3\n"
    assert double.sent("GET", f"/pods/{NAME}-master-0/log")[-1].query["container"] == "pytorch"

    await executor.stop(launch, handle, grace_seconds=3)
    [delete] = double.sent("DELETE", f"/pytorchjobs/{NAME}")
    assert delete.query == {"propagationPolicy": "Foreground", "gracePeriodSeconds": "3"}
    assert double.pytorchjobs == {} and double.pods == {} and double.secrets == {}
    state = await executor.poll(launch, handle)
    assert state.reason == f"lost: the Kubernetes PyTorchJob {NS}/{NAME} no longer exists"


async def test_a_failed_pytorchjob_names_the_worker(double, tmp_path, storage):
    double.training_operator = True
    executor = lifecycle_executor(double, tmp_path, storage)
    launch = make_launch(storage, limits=Resources(cpu=2, memory=4096, shm=0, workers=2))
    handle = await executor.execute(launch)
    double.set_pytorchjob_status(NS, NAME, fixture("pytorchjob_status_failed.json"))
    double.add_pod(worker_pod("pod_running.json", 0, pytorchjob=True))
    double.add_pod(worker_pod("pod_oomkilled.json", 1, pytorchjob=True))
    state = await executor.poll(launch, handle)
    assert (state.running, state.exit_code) == (False, 137)
    assert state.reason == "worker 1 exceeded its memory limit of 4096 MB"


async def test_the_kind_can_be_chosen_without_asking_the_cluster(double, tmp_path, storage):
    double.training_operator = True
    executor = lifecycle_executor(double, tmp_path, storage, distributed="indexed-job")
    handle = await executor.execute(make_launch(storage, limits=Resources(cpu=1, memory=512, workers=2)))
    assert handle["kind"] == "Job" and not double.sent("GET", "/apis/kubeflow.org/v1")
    single = await executor.execute(make_launch(storage, job_id="43"))
    assert "kind" not in single  # one worker: a plain Job
    assert double.jobs[(NS, "kpl-job-43")]["spec"]["completionMode"] == "NonIndexed"
