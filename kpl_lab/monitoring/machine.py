"""Live use of the machine: CPU, memory, disks, each GPU and NPU.

GPUs are read by the one NVML reader (`kpl_lab.engine.usage.read_gpus`), each with its
`utilization_percent`, memory and the users of its processes; NPUs through a pluggable reader
(a callable returning a list of dicts in the same words). A machine without GPUs says so
(`gpu_error`).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterable
from typing import Any

import psutil

from ..engine.usage import read_gpus

NpuReader = Callable[[], list[dict]]


def name() -> str:
    """Return this machine's name, as the `machine` label and scope say it."""
    return socket.gethostname()


def _owner(pid: int) -> str:
    """Return the user of a process: its KPL user (JUPYTERHUB_USER) or its system user."""
    try:
        process = psutil.Process(pid)
        return process.environ().get("JUPYTERHUB_USER") or process.username()
    except (psutil.Error, OSError):
        return f"pid {pid}"


def disks(paths: Iterable[str]) -> list[dict]:
    """Return the use of the file systems holding `paths` (each file system once)."""
    found: dict[int, dict] = {}
    for path in paths:
        try:
            device = os.stat(path).st_dev
            use = psutil.disk_usage(path)
        except OSError:
            continue  # not there (yet): nothing to say about it
        found.setdefault(
            device,
            {"path": str(path), "used_bytes": use.used, "total_bytes": use.total, "percent": use.percent},
        )
    return list(found.values())


def sample(nvml: Any = None, npu_reader: NpuReader | None = None, paths: Iterable[str] = ()) -> dict:
    """Return one sample of the machine's use now (`paths`: the folders whose disks count)."""
    memory = psutil.virtual_memory()
    gpus, gpu_error = read_gpus(nvml=nvml)
    for gpu in gpus:
        for process in gpu["processes"]:
            process["user"] = _owner(process["pid"])
    npus: list[dict] = []
    npu_error = "no NPU reader configured"
    if npu_reader is not None:
        try:
            npus, npu_error = npu_reader(), None
        except Exception as error:
            npu_error = f"the NPU reader failed: {error}"
    return {
        "time": time.time(),
        "machine": name(),
        "cpu_percent": psutil.cpu_percent(interval=None),
        "cpu_count": psutil.cpu_count() or 1,
        "memory_used_mb": (memory.total - memory.available) // (1 << 20),
        "memory_total_mb": memory.total // (1 << 20),
        "disks": disks(paths),
        "gpus": gpus,
        "gpu_error": gpu_error,
        "npus": npus,
        "npu_error": npu_error,
    }
