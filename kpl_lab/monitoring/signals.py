"""What an alert rule may watch: named signals of a snapshot, each with its scope and series.

A signal reads a `Snapshot` into series: labels (which machine, project, deployment or
notebook) and a value. A rule names one signal, compares each series with its threshold, and
may keep to one target of the signal's scope (`matches`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .snapshot import Snapshot

MACHINE, PROJECT, DEPLOYMENT = "machine", "project", "deployment"
SCOPES = (MACHINE, PROJECT, DEPLOYMENT)

Series = list[tuple[dict[str, str], float]]


@dataclass(frozen=True)
class Signal:
    """A number of the platform an alert rule may watch."""

    name: str
    scope: str
    unit: str
    description: str
    read: Callable[[Snapshot], Series]


def _host(snapshot: Snapshot) -> dict[str, str]:
    return {"machine": snapshot.machine.get("machine", "")}


def _memory(snapshot: Snapshot) -> Series:
    machine = snapshot.machine
    return [(_host(snapshot), 100.0 * machine["memory_used_mb"] / max(1, machine["memory_total_mb"]))]


def _cpu(snapshot: Snapshot) -> Series:
    return [(_host(snapshot), float(snapshot.machine["cpu_percent"]))]


def _disks(snapshot: Snapshot) -> Series:
    return [
        ({**_host(snapshot), "path": d["path"]}, float(d["percent"]))
        for d in snapshot.machine.get("disks", [])
    ]


def _devices(kind: str, key: str) -> Callable[[Snapshot], Series]:
    def read(snapshot: Snapshot) -> Series:
        found = []
        for index, unit in enumerate(snapshot.machine.get(f"{kind}s", [])):
            if key == "memory":
                total = unit.get("memory_total_mb")
                value = 100.0 * unit.get("memory_used_mb", 0) / total if total else None
            else:
                value = unit.get("utilization_percent")
            if value is not None:
                found.append(({**_host(snapshot), kind: str(unit.get("index", index))}, float(value)))
        return found

    return read


def _failed(snapshot: Snapshot) -> Series:
    return [({"project": project}, float(len(ids))) for project, ids in sorted(snapshot.failed.items())]


def _queued(snapshot: Snapshot) -> Series:
    projects = snapshot.projects
    return [({"project": p}, float(snapshot.jobs.get((p, "queued"), 0))) for p in sorted(projects)]


def _storage(snapshot: Snapshot) -> Series:
    totals: dict[str, int] = {}
    for (project, _), (_, size) in snapshot.catalog.items():
        totals[project] = totals.get(project, 0) + size
    return [({"project": project}, size / 1e9) for project, size in sorted(totals.items())]


def _idle_notebooks(snapshot: Snapshot) -> Series:
    utilization = snapshot.gpu_utilization()
    found = []
    for held in snapshot.reservations:
        gpus = [utilization[i] for i in held["devices"].get("gpu", []) if i in utilization]
        if held["kind"] == "notebook" and gpus:
            labels = {"project": held["project"], "notebook": held["owner"], "user": held["user"]}
            found.append((labels, sum(gpus) / len(gpus)))
    return found


def _errors(snapshot: Snapshot) -> Series:
    return [
        ({"project": d["project"], "deployment": d["name"]}, d["error_percent"])
        for d in snapshot.deployments
        if d["error_percent"] is not None
    ]


SIGNALS: dict[str, Signal] = {
    signal.name: signal
    for signal in (
        Signal("machine_memory_percent", MACHINE, "%", "memory in use on the machine", _memory),
        Signal("machine_cpu_percent", MACHINE, "%", "CPU use of the machine (all cores)", _cpu),
        Signal(
            "machine_disk_percent",
            MACHINE,
            "%",
            "space used on the disk of the platform's home or storage",
            _disks,
        ),
        Signal(
            "gpu_utilization_percent", MACHINE, "%", "utilization of each GPU", _devices("gpu", "utilization")
        ),
        Signal("gpu_memory_percent", MACHINE, "%", "memory in use on each GPU", _devices("gpu", "memory")),
        Signal(
            "npu_utilization_percent", MACHINE, "%", "utilization of each NPU", _devices("npu", "utilization")
        ),
        Signal(
            "project_jobs_failed",
            PROJECT,
            "jobs",
            "jobs of the project that failed in the last 10 minutes",
            _failed,
        ),
        Signal("project_jobs_queued", PROJECT, "jobs", "jobs of the project waiting in the queue", _queued),
        Signal(
            "project_storage_gb",
            PROJECT,
            "GB",
            "size of the project's datasets, models and algorithms",
            _storage,
        ),
        Signal(
            "notebook_gpu_utilization_percent",
            PROJECT,
            "%",
            "mean utilization of the GPUs a notebook holds (a GPU notebook left idle)",
            _idle_notebooks,
        ),
        Signal(
            "deployment_error_percent",
            DEPLOYMENT,
            "%",
            "share of a deployment's predictions that failed over the last 5 minutes (10 requests or more)",
            _errors,
        ),
    )
}


def matches(scope: str, target: str, labels: dict[str, str]) -> bool:
    """Say whether a series is the rule's target: `""` every one, else a machine, a project, or PROJECT/DEPLOYMENT."""
    if not target:
        return True
    if scope == DEPLOYMENT:
        return target == f"{labels.get('project')}/{labels.get('deployment')}"
    return labels.get(scope) == target
