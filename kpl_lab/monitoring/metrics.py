"""The platform's metrics in Prometheus' format, as JupyterHub and Jupyter Server expose theirs.

Three kinds, all in prometheus_client's default registry (the one `/metrics` answers):
- counted on the request path, one histogram observation each: API requests by method,
  route template (`/kpl/api/datasets/{name}`, never the raw path) and status;
- counted where the work ends: dataset imports and their waits (`ImportQueue`);
- read from the host's latest `Snapshot` at scrape time (`PlatformCollector`): jobs by state,
  queue waits, trials, deployments and their replicas, reservations of jobs, notebooks and
  replicas, running jobs' measured use, the machine (CPU, memory, disks, GPUs, NPUs), storage
  per project, and each deployment's requests per model version as its gateways wrote them
  to the catalog (`GatewayTraffic`: counters that only grow, across gateway processes).
A scrape runs no query: the snapshot is taken in the background round.
"""

from __future__ import annotations

import threading
import weakref
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from sqlalchemy import select

from ..catalog.deployments import Deployment, DeploymentMetrics
from ..catalog.models import Project
from ..serving.history import bin_value

if TYPE_CHECKING:
    from .monitor import Monitor

MB = 1 << 20
SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
WAIT_BUCKETS = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 24 * 3600.0)
TRAFFIC_WINDOW = timedelta(minutes=10)  # a gateway's bucket is still written to within this

REQUEST_SECONDS = Histogram(
    "kpl_http_request_duration_seconds",
    "KPL API requests by method, route template and status, and how long they took",
    ["method", "route", "status"],
    buckets=SECONDS_BUCKETS,
)
IMPORTS = Counter("kpl_dataset_imports", "Dataset imports that ended, by outcome (ok, failed)", ["outcome"])
IMPORT_WAIT = Histogram(
    "kpl_dataset_import_wait_seconds", "How long dataset imports waited for a worker", buckets=WAIT_BUCKETS
)
JOB_WAIT = Histogram(
    "kpl_job_queue_wait_seconds",
    "How long jobs waited queued before they started, by project (seen by this host)",
    ["project"],
    buckets=WAIT_BUCKETS,
)

_route_templates: dict[type, str] = {}


def route_template(handler_class: type) -> str:
    """Return the route template a handler serves (its class name for a route of no table)."""
    found = _route_templates.get(handler_class)
    if found is None:
        if not _route_templates:
            from ..server_ext.routes import API_PREFIX, ROUTES

            _route_templates.update({route.handler: API_PREFIX + route.path for route in ROUTES})
        found = _route_templates.setdefault(
            handler_class, getattr(handler_class, "route", None) or handler_class.__name__
        )
    return found


def observe_request(handler: Any) -> None:
    """Count one finished API request with its duration (tornado's `on_finish`)."""
    REQUEST_SECONDS.labels(
        handler.request.method, route_template(type(handler)), str(handler.get_status())
    ).observe(handler.request.request_time())


class GatewayTraffic:
    """Each deployment's requests per model version, as counters, from the buckets gateways write.

    Gateways (this process's, the gateway process) add to 10 s buckets in `deployment_metrics`;
    each look adds what grew since the previous one, so the counters only grow and count every
    gateway. They start from what the recent buckets held at the first look.
    """

    def __init__(self) -> None:
        self._seen: dict[int, tuple[int, int, dict[str, int], datetime]] = {}  # row id -> what was counted
        self._lock = threading.Lock()
        # (project, deployment, version) -> requests, errors, latency bins
        self.requests: dict[tuple[str, str, str], int] = defaultdict(int)
        self.errors: dict[tuple[str, str, str], int] = defaultdict(int)
        self.latency: dict[tuple[str, str, str], dict[int, int]] = defaultdict(lambda: defaultdict(int))

    def update(self, platform: Any) -> None:
        """Add what the gateways wrote since the last look."""
        since = datetime.now(UTC) - TRAFFIC_WINDOW
        with platform.session() as session:
            rows = session.execute(
                select(DeploymentMetrics, Project.name, Deployment.name)
                .join(Deployment, DeploymentMetrics.deployment_id == Deployment.id)
                .join(Project)
                .where(DeploymentMetrics.start >= since)
            ).all()
        with self._lock:
            seen = {}
            for row, project, name in rows:
                key = (project, name, row.model_version)
                requests, errors, latency, _ = self._seen.get(row.id, (0, 0, {}, row.start))
                self.requests[key] += row.requests - requests
                self.errors[key] += row.errors - errors
                for index, count in (row.latency or {}).items():
                    self.latency[key][int(index)] += count - latency.get(index, 0)
                seen[row.id] = (row.requests, row.errors, dict(row.latency or {}), row.start)
            self._seen = seen

    def families(self) -> Iterator[Any]:
        """Yield the counters and the latency histogram."""
        labels = ["project", "deployment", "version"]
        requests = CounterMetricFamily(
            "kpl_gateway_requests", "Predictions answered by a deployment's model version", labels=labels
        )
        errors = CounterMetricFamily(
            "kpl_gateway_errors",
            "Predictions that were not answered 2xx (and 503s with no ready replica)",
            labels=labels,
        )
        latency = HistogramMetricFamily(
            "kpl_gateway_request_duration_seconds",
            "How long predictions took through the gateway",
            labels=labels,
        )
        with self._lock:
            for key in sorted(self.requests):
                requests.add_metric(list(key), self.requests[key])
                errors.add_metric(list(key), self.errors[key])
                latency.add_metric(list(key), *_histogram(self.latency[key]))
        yield from (requests, errors, latency)


def _histogram(bins: dict[int, int]) -> tuple[list[tuple[str, float]], float]:
    """Return Prometheus' cumulative buckets and the sum of the gateway's latency bins (milliseconds)."""
    counts = [0] * (len(SECONDS_BUCKETS) + 1)
    total = 0.0
    for index, count in bins.items():
        seconds = bin_value(index) / 1000
        total += seconds * count
        slot = next((i for i, edge in enumerate(SECONDS_BUCKETS) if seconds <= edge), len(SECONDS_BUCKETS))
        counts[slot] += count
    buckets, running = [], 0
    for edge, count in zip([*map(str, SECONDS_BUCKETS), "+Inf"], counts, strict=True):
        running += count
        buckets.append((edge, running))
    return buckets, total


def _gauge(name: str, documentation: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, labels=labels)


class PlatformCollector:
    """Turn each live host's latest snapshot into metric families at scrape time."""

    def __init__(self) -> None:
        self.monitors: weakref.WeakSet[Monitor] = weakref.WeakSet()

    def describe(self) -> list:
        """Say nothing in advance: the families depend on what the platform holds."""
        return []

    def collect(self) -> Iterator[Any]:
        """Yield every family of every live host's latest snapshot."""
        for monitor in list(self.monitors):
            snapshot = monitor.snapshot
            if snapshot is not None:
                yield from families(snapshot)
                yield from monitor.traffic.families()


def families(snapshot: Any) -> Iterator[Any]:
    """Yield the metric families of one snapshot."""
    machine = snapshot.machine
    host = machine.get("machine", "")
    taken = _gauge("kpl_snapshot_timestamp_seconds", "When the platform was last sampled", ["machine"])
    taken.add_metric([host], snapshot.time)
    yield taken

    jobs = _gauge("kpl_jobs", "Jobs by project and state", ["project", "state"])
    for (project, state), count in sorted(snapshot.jobs.items()):
        jobs.add_metric([project, state], count)
    trials = _gauge(
        "kpl_experiment_trials", "Trial jobs of experiments by project and state", ["project", "state"]
    )
    for (project, state), count in sorted(snapshot.trials.items()):
        trials.add_metric([project, state], count)
    experiments = _gauge("kpl_experiments", "Experiments by project and state", ["project", "state"])
    for (project, state), count in sorted(snapshot.experiments.items()):
        experiments.add_metric([project, state], count)
    failed = _gauge("kpl_jobs_failed_recently", "Jobs that failed in the last 10 minutes", ["project"])
    for project, ids in sorted(snapshot.failed.items()):
        failed.add_metric([project], len(ids))
    yield from (jobs, trials, experiments, failed)

    imports = _gauge("kpl_dataset_imports_in_flight", "Dataset imports queued or importing", ["state"])
    for state, count in sorted(snapshot.imports.items()):
        imports.add_metric([state], count)
    yield imports

    deployments = _gauge(
        "kpl_deployment_replicas",
        "Replicas of each deployment by model version",
        ["project", "deployment", "version"],
    )
    wanted = _gauge(
        "kpl_deployment_replicas_wanted", "Replicas each deployment asks for", ["project", "deployment"]
    )
    errors = _gauge(
        "kpl_deployment_error_ratio",
        "Share of a deployment's predictions that failed over the last 5 minutes (10 requests or more)",
        ["project", "deployment"],
    )
    for deployment in snapshot.deployments:
        key = [deployment["project"], deployment["name"]]
        wanted.add_metric(key, deployment["wanted"])
        for version, count in sorted(deployment["replicas"].items()):
            deployments.add_metric([*key, version], count)
        if deployment["error_percent"] is not None:
            errors.add_metric(key, deployment["error_percent"] / 100)
    yield from (deployments, wanted, errors)

    owner = ["project", "kind", "owner", "user"]
    cpu = _gauge("kpl_reserved_cpus", "CPUs held by each job, notebook and replica", owner)
    memory = _gauge("kpl_reserved_memory_bytes", "Memory held by each job, notebook and replica", owner)
    devices = _gauge(
        "kpl_reserved_devices", "Accelerators held by each job, notebook and replica", [*owner, "device"]
    )
    busy = _gauge(
        "kpl_reserved_gpu_utilization_percent",
        "Mean utilization of the GPUs each job, notebook and replica holds",
        owner,
    )
    utilization = snapshot.gpu_utilization()
    for held in snapshot.reservations:
        key = [held["project"], held["kind"], held["owner"], held["user"]]
        cpu.add_metric(key, held["cpu"])
        memory.add_metric(key, held["memory"] * MB)
        for kind, indexes in sorted(held["devices"].items()):
            devices.add_metric([*key, kind], len(indexes))
        gpus = [utilization[i] for i in held["devices"].get("gpu", []) if i in utilization]
        if gpus:
            busy.add_metric(key, sum(gpus) / len(gpus))
    yield from (cpu, memory, devices, busy)

    job = ["project", "job", "user"]
    job_cpu = _gauge("kpl_job_cpu_percent", "CPU use of each running job (100 = one core)", job)
    job_memory = _gauge("kpl_job_memory_bytes", "Resident memory of each running job", job)
    job_gpu = _gauge(
        "kpl_job_gpu_utilization_percent", "Utilization of each GPU a running job uses", [*job, "gpu"]
    )
    job_gpu_memory = _gauge(
        "kpl_job_gpu_memory_bytes", "GPU memory each running job's processes use", [*job, "gpu"]
    )
    for running in snapshot.running:
        key = [running["project"], running["id"], running["user"]]
        latest = running["latest"]
        if latest.get("cpu_percent") is not None:
            job_cpu.add_metric(key, latest["cpu_percent"])
        if latest.get("memory_mb") is not None:
            job_memory.add_metric(key, latest["memory_mb"] * MB)
        for gpu in latest.get("gpus", []):
            job_gpu.add_metric([*key, str(gpu["index"])], gpu["utilization_percent"])
            job_gpu_memory.add_metric([*key, str(gpu["index"])], gpu.get("job_memory_mb", 0) * MB)
    yield from (job_cpu, job_memory, job_gpu, job_gpu_memory)

    storage = _gauge(
        "kpl_project_storage_bytes",
        "Bytes of each project's datasets, models and algorithms",
        ["project", "kind"],
    )
    items = _gauge(
        "kpl_project_items", "Datasets, models and algorithms of each project", ["project", "kind"]
    )
    for (project, kind), (count, size) in sorted(snapshot.catalog.items()):
        storage.add_metric([project, kind], size)
        items.add_metric([project, kind], count)
    yield from (storage, items)

    yield from machine_families(machine)


def machine_families(machine: dict) -> Iterator[Any]:
    """Yield the machine's use: CPU, memory, disks, GPUs, NPUs and the GPU memory of each user."""
    host = [machine.get("machine", "")]
    cpu = _gauge("kpl_machine_cpu_percent", "CPU use of the machine (100 = every core busy)", ["machine"])
    cpu.add_metric(host, machine["cpu_percent"])
    cores = _gauge("kpl_machine_cpus", "CPU cores of the machine", ["machine"])
    cores.add_metric(host, machine["cpu_count"])
    used = _gauge("kpl_machine_memory_used_bytes", "Memory in use (total less available)", ["machine"])
    used.add_metric(host, machine["memory_used_mb"] * MB)
    total = _gauge("kpl_machine_memory_bytes", "Memory of the machine", ["machine"])
    total.add_metric(host, machine["memory_total_mb"] * MB)
    yield from (cpu, cores, used, total)
    disk_used = _gauge(
        "kpl_machine_disk_used_bytes",
        "Bytes used on the disks of the platform's folders",
        ["machine", "path"],
    )
    disk_total = _gauge(
        "kpl_machine_disk_bytes", "Size of the disks of the platform's folders", ["machine", "path"]
    )
    for disk in machine.get("disks", []):
        disk_used.add_metric([*host, disk["path"]], disk["used_bytes"])
        disk_total.add_metric([*host, disk["path"]], disk["total_bytes"])
    yield from (disk_used, disk_total)
    for kind in ("gpu", "npu"):
        device = ["machine", kind, "name"]
        busy = _gauge(f"kpl_{kind}_utilization_percent", f"Utilization of each {kind.upper()}", device)
        memory = _gauge(f"kpl_{kind}_memory_used_bytes", f"Memory in use on each {kind.upper()}", device)
        size = _gauge(f"kpl_{kind}_memory_bytes", f"Memory of each {kind.upper()}", device)
        for index, unit in enumerate(machine.get(f"{kind}s", [])):
            key = [*host, str(unit.get("index", index)), str(unit.get("name", ""))]
            if unit.get("utilization_percent") is not None:
                busy.add_metric(key, unit["utilization_percent"])
            if unit.get("memory_used_mb") is not None:
                memory.add_metric(key, unit["memory_used_mb"] * MB)
            if unit.get("memory_total_mb") is not None:
                size.add_metric(key, unit["memory_total_mb"] * MB)
        yield from (busy, memory, size)
    per_user: dict[str, float] = defaultdict(float)
    for gpu in machine.get("gpus", []):
        for process in gpu.get("processes", []):
            per_user[process.get("user", "")] += process["memory_mb"]
    users = _gauge(
        "kpl_user_gpu_memory_bytes", "GPU memory used by each user's processes", ["machine", "user"]
    )
    for user, megabytes in sorted(per_user.items()):
        users.add_metric([*host, user], megabytes * MB)
    yield users


COLLECTOR = PlatformCollector()
REGISTRY.register(COLLECTOR)
