"""JobService on the Kubernetes executor: submit, tick, pushed events, the end, against the API double."""

from __future__ import annotations

import asyncio
import base64
import copy
import importlib.util
import json
import sys
from pathlib import Path

import pytest
from traitlets.config import Config

from kpl_lab.engine.kubernetes import job_name
from kpl_lab.engine.launch import Resources
from kpl_lab.engine.service import JobRequest
from kpl_lab.errors import BadRequest, Conflict, Forbidden
from kpl_lab.platform import Platform

from .conftest import environment

pytestmark = pytest.mark.databases


def _load_double():
    path = Path(__file__).with_name("k8s_double.py")
    spec = importlib.util.spec_from_file_location("kpl_tests_k8s_double", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


_double = _load_double()
K8sDouble, fixture = _double.K8sDouble, _double.fixture

NS = "kpl-p"  # KubernetesExecutor.namespace "kpl-{project}" for project p


@pytest.fixture
async def double():
    server = K8sDouble()
    await server.start()
    yield server
    await server.close()


@pytest.fixture
def platform(double, tmp_path, database_url):
    home = tmp_path / "home"
    config = Config(
        {
            "Ledger": {
                "cpu": 4.0,
                "memory": 4096,
                "devices": {"gpu": [{"index": 0, "name": "A100"}, {"index": 1, "name": "A100"}]},
            },
            "JobService": {
                "executor_class": "kpl_lab.engine.kubernetes.KubernetesExecutor",
                "grace_seconds": 0,
            },
            "KubernetesExecutor": {
                "kubeconfig": str(double.kubeconfig(tmp_path / "kubeconfig")),
                "storage_root": str(home / "storage"),
                "default_image": "registry.example.com/kpl/torch:2",
                "events_url": "http://kpl-lab:8888/kpl/api/jobs/{job_id}/events",
                "run_as_user": None,
                "termination_grace_seconds": 0,
            },
        }
    )
    if database_url:
        config.Platform.database_url = database_url
    made = Platform(home=str(home), config=config)
    folder = tmp_path / "src" / "gpu-train"
    folder.mkdir(parents=True)
    (folder / "environment.yml").write_text(environment("python train.py", gpu=1))
    (folder / "parameter.yml").write_text("x: 1\n")
    made.catalog.add_algorithm("p", folder)
    yield made
    made.close()


def pod(job_id: str, name: str) -> dict:
    """Return a recorded pod fixture made into the pod of this job."""
    data = copy.deepcopy(fixture(name))
    meta = data["metadata"]
    meta["name"], meta["namespace"] = f"{job_name(job_id)}-x7k2p", NS
    meta["labels"].update({"job-name": job_name(job_id), "batch.kubernetes.io/job-name": job_name(job_id)})
    meta["labels"].update({"kpl-lab.io/job-id": job_id, "kpl-lab.io/project": "p"})
    for owner in meta.get("ownerReferences", []):
        owner["name"] = job_name(job_id)
    return data


def token_of(double: K8sDouble, job_id: str) -> str:
    secret = double.secrets[(NS, job_name(job_id) + "-token")]
    return base64.b64decode(secret["data"]["token"]).decode()


def metric(step: int) -> dict:
    return {
        "type": "metric",
        "time": 1e9 + step,
        "title": "loss",
        "x": step,
        "values": {"train": 1 / (step + 1)},
    }


async def test_full_lifecycle_with_pushed_events(platform, double):
    jobs = platform.jobs
    call = asyncio.to_thread  # the service is synchronous; the double answers on this loop
    job = await call(jobs.submit, JobRequest(project="p", algorithm="gpu-train"))
    assert job.state == "running" and job.executor == "KubernetesExecutor"
    assert job.assigned_devices == {"gpu": [0]}  # the ledger still counts the GPU
    manifest = double.jobs[(NS, job_name(job.id))]
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert "CUDA_VISIBLE_DEVICES" not in env  # the device plugin picks the GPU, not the ledger
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    launch = json.loads((jobs.run_dir(job) / "job.json").read_text())
    assert launch["assigned_devices"] == {}
    token = token_of(double, job.id)
    assert token not in json.dumps(job.handle)  # only its SHA-256 is kept

    double.set_job_status(NS, job_name(job.id), fixture("job_status_running.json"))
    double.add_pod(pod(job.id, "pod_running.json"))
    assert await call(jobs.tick) == []
    job = jobs.get("p", job.id)
    assert job.state == "running" and job.handle["pod"] == f"{job_name(job.id)}-x7k2p"

    with pytest.raises(Forbidden):
        await call(jobs.ingest_events, job.id, "not-the-token", [metric(0)])
    with pytest.raises(Forbidden):
        await call(jobs.ingest_events, job.id, "", [metric(0)])
    with pytest.raises(BadRequest, match=r"events\[1\]"):
        await call(jobs.ingest_events, job.id, token, [metric(0), {"no": "type"}])
    assert jobs.metrics("p", job.id) == {}  # refused pushes left nothing behind

    assert await call(jobs.ingest_events, job.id, token, [metric(0), metric(1)]) == 2
    progress = {"type": "progress", "time": 1e9 + 2, "value": 0.5}
    assert await call(jobs.ingest_events, job.id, token, [metric(2), progress]) == 2
    jobs.ingest(job.id)  # ingesting again (as a tick does) never duplicates a point
    assert [y for _, y in jobs.metrics("p", job.id)["loss"]["train"]] == [1.0, 0.5, pytest.approx(1 / 3)]
    assert jobs.get("p", job.id).progress == 0.5
    lines = (jobs.run_dir(job) / "events.jsonl").read_text().splitlines()
    assert [json.loads(line)["type"] for line in lines] == ["metric", "metric", "metric", "progress"]

    double.set_job_status(NS, job_name(job.id), fixture("job_status_succeeded.json"))
    name = f"{job_name(job.id)}-x7k2p"
    double.pods[(NS, name)] = {**double.pods[(NS, name)], **pod(job.id, "pod_succeeded.json")}
    double.logs[(NS, name)] = "epoch 1\nepoch 2\ntrained\n"
    assert await call(jobs.tick) == [job.id]
    job = jobs.get("p", job.id)
    assert (job.state, job.exit_code, job.reason) == ("succeeded", 0, "")
    assert (jobs.run_dir(job) / "output.log").read_text().endswith("trained\n")
    # the job gave its GPU back: both GPUs can be reserved again
    assert jobs.ledger.reserve("p", "job", "other", Resources(cpu=1, memory=256, devices={"gpu": 2}))
    jobs.ledger.release("job", "other")
    with pytest.raises(Conflict):
        await call(jobs.ingest_events, job.id, token, [metric(3)])


async def test_stuck_job_fails_and_its_kubernetes_job_is_deleted(platform, double):
    jobs = platform.jobs
    job = await asyncio.to_thread(jobs.submit, JobRequest(project="p", algorithm="gpu-train"))
    double.add_pod(pod(job.id, "pod_image_pull_backoff.json"))
    assert await asyncio.to_thread(jobs.tick) == [job.id]
    job = jobs.get("p", job.id)
    assert job.state == "failed" and "could not be pulled (ImagePullBackOff)" in job.reason
    assert (NS, job_name(job.id)) not in double.jobs  # on_failure deleted what would never end
    assert double.sent("DELETE", f"/jobs/{job_name(job.id)}")


async def test_stop_and_restart_reattach(platform, double):
    jobs = platform.jobs
    job = await asyncio.to_thread(jobs.submit, JobRequest(project="p", algorithm="gpu-train"))
    double.set_job_status(NS, job_name(job.id), fixture("job_status_running.json"))
    double.add_pod(pod(job.id, "pod_running.json"))

    again = Platform(home=platform.home, config=platform.config)  # the server restarted
    try:
        assert await asyncio.to_thread(again.jobs.reconcile) == {job.id: "running"}
        stopped = await asyncio.to_thread(again.jobs.stop, "p", job.id)
    finally:
        again.close()
    assert stopped.state == "stopped" and stopped.reason == "stopped on request"
    assert (NS, job_name(job.id)) not in double.jobs


async def test_a_job_of_two_workers_is_one_indexed_job(platform, double):
    jobs = platform.jobs
    request = JobRequest(
        project="p", algorithm="gpu-train", resources={"workers": 2, "cpu": 1, "memory": 512}
    )
    job = await asyncio.to_thread(jobs.submit, request)
    assert job.state == "running" and job.assigned_devices == {"gpu": [0, 1]}  # 2 workers × 1 GPU
    assert job.handle["kind"] == "Job" and job.handle["workers"] == 2
    manifest = double.jobs[(NS, job_name(job.id))]
    assert (manifest["spec"]["completionMode"], manifest["spec"]["completions"]) == ("Indexed", 2)
    assert (NS, job_name(job.id)) in double.services

    def worker_pod(rank: int, name: str) -> dict:
        data = pod(job.id, name)
        data["metadata"]["name"] = f"{job_name(job.id)}-{rank}-x7k2p"
        data["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] = str(rank)
        return data

    double.set_job_status(NS, job_name(job.id), fixture("job_status_failed.json"))
    double.add_pod(worker_pod(0, "pod_running.json"))
    double.add_pod(worker_pod(1, "pod_failed_exit.json"))
    double.logs[(NS, f"{job_name(job.id)}-0-x7k2p")] = "rank 0 waiting\n"
    double.logs[(NS, f"{job_name(job.id)}-1-x7k2p")] = "loading\nValueError: bad shard\n"
    assert await asyncio.to_thread(jobs.tick) == [job.id]
    job = jobs.get("p", job.id)
    assert (job.state, job.exit_code) == ("failed", 2)
    assert job.reason == "worker 1 exited with code 2: ValueError: bad shard"
    assert list(jobs.follow_logs("p", job.id)) == ["rank 0 waiting"]
    assert list(jobs.follow_logs("p", job.id, worker=1)) == ["loading", "ValueError: bad shard"]
