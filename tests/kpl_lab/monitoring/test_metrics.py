"""The Prometheus exposition: each family read back from /metrics' text, and linted by promtool where it is installed."""

from __future__ import annotations

import shutil
import subprocess
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import update

from kpl_lab.catalog.deployments import Deployment, DeploymentMetrics, Replica
from kpl_lab.catalog.jobs import Job, Reservation
from kpl_lab.catalog.models import Dataset, DatasetVersion, Model, ModelVersion, Project, utcnow
from kpl_lab.monitoring.monitor import Monitor
from kpl_lab.server_ext.imports import ImportQueue
from kpl_lab.serving.history import latency_bin

from .conftest import two_gpus

pytestmark = pytest.mark.databases
MB = 1 << 20


def populate(platform) -> None:
    """Write a project with jobs in every state, a trial, a dataset, a model, a deployment and reservations."""
    now = utcnow()
    with platform.session() as session:
        project = Project(name="vision")
        session.add(project)
        session.flush()
        usage = {"latest": {"cpu_percent": 150.0, "memory_mb": 512.0}}
        usage["latest"]["gpus"] = [
            {"index": 0, "utilization_percent": 75.0, "memory_mb": 1000, "job_memory_mb": 100}
        ]
        session.add_all(
            [
                Job(
                    id="j-run",
                    project_id=project.id,
                    function="train",
                    state="running",
                    user="alice",
                    usage=usage,
                ),
                Job(id="j-fail", project_id=project.id, function="train", state="failed", finished=now),
                Job(id="j-queue", project_id=project.id, function="train", state="queued", created=now),
                Job(
                    id="j-trial",
                    project_id=project.id,
                    function="train",
                    state="succeeded",
                    experiment="lr",
                    trial=0,
                ),
            ]
        )
        dataset = Dataset(project_id=project.id, name="digits")
        model = Model(project_id=project.id, name="net")
        session.add_all([dataset, model])
        session.flush()
        session.add(DatasetVersion(dataset_id=dataset.id, version="v1", path="d", size_bytes=1000))
        session.add(ModelVersion(model_id=model.id, version="v1", path="m", size_bytes=500))
        deployment = Deployment(project_id=project.id, name="api", replicas=2, user="bob")
        session.add(deployment)
        session.flush()
        session.add(Replica(id="r-1", deployment_id=deployment.id, model_ref="net:v1", run_dir="r"))
        bucket = now.replace(second=now.second - now.second % 10, microsecond=0)
        session.add(
            DeploymentMetrics(
                deployment_id=deployment.id,
                model_version="net:v1",
                start=bucket,
                requests=20,
                errors=2,
                latency={str(latency_bin(20.0)): 18},
            )
        )
        session.add_all(
            [
                Reservation(
                    project="vision",
                    owner_kind="job",
                    owner_id="j-run",
                    cpu=2,
                    memory=1024,
                    devices={"gpu": [0]},
                ),
                Reservation(
                    project="vision", owner_kind="notebook", owner_id="alice/", cpu=1, memory=512, devices={}
                ),
                Reservation(
                    project="vision", owner_kind="deployment", owner_id="r-1", cpu=1, memory=256, devices={}
                ),
            ]
        )


def exposition() -> str:
    return generate_latest(REGISTRY).decode()


def samples(text: str) -> dict[str, list]:
    """Return sample name -> [(labels, value)] of an exposition."""
    found: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def value(found: dict, metric: str, **labels) -> float:
    matching = [v for have, v in found.get(metric, []) if all(have.get(k) == w for k, w in labels.items())]
    assert len(matching) == 1, (metric, labels, found.get(metric))
    return matching[0]


def count_or_zero(found: dict, metric: str, **labels) -> float:
    """Return a sample's value, 0 while the process has observed none (histograms are the process's)."""
    return sum(v for have, v in found.get(metric, []) if all(have.get(k) == w for k, w in labels.items()))


@pytest.fixture
def monitor(platform):
    imports = ImportQueue(1, 2)
    monitor = Monitor(platform, imports=imports)
    monitor.nvml = two_gpus()
    yield monitor
    monitor.close()
    imports.shutdown()


def test_each_family_of_a_snapshot(platform, monitor):
    populate(platform)
    monitor.sample(force=True)
    found = samples(exposition())
    host = monitor.live["machine"]

    assert value(found, "kpl_jobs", project="vision", state="running") == 1
    assert value(found, "kpl_jobs", project="vision", state="queued") == 1
    assert value(found, "kpl_jobs_failed_recently", project="vision") == 1
    assert value(found, "kpl_experiment_trials", project="vision", state="succeeded") == 1
    assert value(found, "kpl_dataset_imports_in_flight", state="queued") == 0
    assert value(found, "kpl_deployment_replicas", project="vision", deployment="api", version="net:v1") == 1
    assert value(found, "kpl_deployment_replicas_wanted", deployment="api") == 2
    assert value(found, "kpl_deployment_error_ratio", deployment="api") == pytest.approx(0.1)
    assert value(found, "kpl_gateway_requests_total", deployment="api", version="net:v1") == 20
    assert value(found, "kpl_gateway_errors_total", deployment="api", version="net:v1") == 2
    assert value(found, "kpl_gateway_request_duration_seconds_count", deployment="api") == 18
    assert value(found, "kpl_gateway_request_duration_seconds_bucket", deployment="api", le="0.01") == 0
    assert value(found, "kpl_gateway_request_duration_seconds_bucket", deployment="api", le="0.025") == 18
    assert value(found, "kpl_reserved_cpus", kind="job", owner="j-run", user="alice") == 2
    assert value(found, "kpl_reserved_cpus", kind="notebook", owner="alice/", user="alice") == 1
    assert value(found, "kpl_reserved_memory_bytes", kind="deployment", owner="r-1", user="bob") == 256 * MB
    assert value(found, "kpl_reserved_devices", owner="j-run", device="gpu") == 1
    assert value(found, "kpl_reserved_gpu_utilization_percent", owner="j-run") == 75
    assert value(found, "kpl_job_cpu_percent", job="j-run", user="alice") == 150
    assert value(found, "kpl_job_memory_bytes", job="j-run") == 512 * MB
    assert value(found, "kpl_job_gpu_utilization_percent", job="j-run", gpu="0") == 75
    assert value(found, "kpl_project_storage_bytes", project="vision", kind="datasets") == 1000
    assert value(found, "kpl_project_storage_bytes", project="vision", kind="models") == 500
    assert value(found, "kpl_project_items", project="vision", kind="datasets") == 1
    assert value(found, "kpl_machine_cpus", machine=host) >= 1
    assert value(found, "kpl_machine_memory_bytes", machine=host) > value(
        found, "kpl_machine_memory_used_bytes"
    )
    assert value(found, "kpl_machine_disk_bytes", path=str(platform.home)) > 0
    assert value(found, "kpl_gpu_utilization_percent", gpu="0", name="Fake A100") == 75
    assert value(found, "kpl_gpu_memory_bytes", gpu="1") == 40960 * MB
    assert sum(v for _, v in found["kpl_user_gpu_memory_bytes"]) == 900 * MB
    assert value(found, "kpl_snapshot_timestamp_seconds", machine=host) == pytest.approx(
        monitor.snapshot.time
    )


def test_gateway_counters_only_grow_and_count_every_gateway(platform, monitor):
    populate(platform)
    monitor.sample(force=True)
    with platform.session() as session:  # another gateway adds to the same bucket
        session.execute(update(DeploymentMetrics).values(requests=DeploymentMetrics.requests + 5))
    monitor.sample(force=True)
    assert value(samples(exposition()), "kpl_gateway_requests_total", deployment="api") == 25


def test_a_jobs_queue_wait_is_observed_once_it_starts(platform, monitor):
    populate(platform)
    monitor.sample(force=True)
    before = count_or_zero(samples(exposition()), "kpl_job_queue_wait_seconds_count", project="vision")
    started = datetime.now(UTC) + timedelta(seconds=1)
    with platform.session() as session:
        session.execute(
            update(Job)
            .where(Job.id == "j-queue")
            .values(state="running", created=started - timedelta(seconds=30), started=started)
        )
    monitor.sample(force=True)
    found = samples(exposition())
    assert value(found, "kpl_job_queue_wait_seconds_count", project="vision") == before + 1
    assert value(found, "kpl_job_queue_wait_seconds_sum", project="vision") >= 30


def test_a_closed_host_is_no_longer_exposed(platform):
    monitor = Monitor(platform)
    monitor.sample(force=True)
    assert "kpl_snapshot_timestamp_seconds" in exposition()
    monitor.close()
    assert "kpl_snapshot_timestamp_seconds{" not in exposition()


@pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool: apt-get install prometheus (.ci/run does)"
)
def test_promtool_finds_nothing_to_lint(platform, monitor):
    populate(platform)
    monitor.sample(force=True)
    checked = subprocess.run(
        ["promtool", "check", "metrics"], input=exposition(), capture_output=True, text=True, timeout=60
    )
    ours = [line for line in (checked.stdout + checked.stderr).splitlines() if line.startswith("kpl_")]
    assert ours == []
