"""Live use of the machine (CPU, memory, each GPU and NPU) and its 24-hour history.

GPUs are read with nvidia-ml-py (`pynvml`), each with its utilisation, memory and the users
of its processes; NPUs through a pluggable reader (a callable returning a list of dicts). A
machine without GPUs says so (`gpu_error`). Samples are kept 24 hours in a SQLite file.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

HISTORY_SECONDS = 24 * 3600
NpuReader = Callable[[], list[dict]]


def _owner(pid: int) -> str:
    """Return the user of a process: its KPL user (JUPYTERHUB_USER) or its system user."""
    try:
        process = psutil.Process(pid)
        return process.environ().get("JUPYTERHUB_USER") or process.username()
    except (psutil.Error, OSError):
        return f"pid {pid}"


def read_gpus(nvml: Any = None) -> tuple[list[dict], str | None]:
    """Return each GPU's utilisation, memory and processes, or ([], why there are none)."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return [], "nvidia-ml-py is not installed"
    try:
        nvml.nvmlInit()
    except Exception as error:  # NVMLError_LibraryNotFound, DriverNotLoaded...
        return [], f"no NVIDIA GPU here ({error})"
    try:
        gpus = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            rates = nvml.nvmlDeviceGetUtilizationRates(handle)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            processes = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            name = nvml.nvmlDeviceGetName(handle)
            gpus.append(
                {
                    "index": index,
                    "name": name.decode() if isinstance(name, bytes) else name,
                    "utilisation": rates.gpu,
                    "memory_used_mb": memory.used // (1 << 20),
                    "memory_total_mb": memory.total // (1 << 20),
                    "processes": [
                        {
                            "pid": p.pid,
                            "user": _owner(p.pid),
                            "memory_mb": (p.usedGpuMemory or 0) // (1 << 20),
                        }
                        for p in processes
                    ],
                }
            )
        return gpus, None
    finally:
        nvml.nvmlShutdown()


def sample(nvml: Any = None, npu_reader: NpuReader | None = None) -> dict:
    """Return one sample of the machine's use now."""
    memory = psutil.virtual_memory()
    gpus, gpu_error = read_gpus(nvml)
    npus: list[dict] = []
    npu_error = "no NPU reader configured"
    if npu_reader is not None:
        try:
            npus, npu_error = npu_reader(), None
        except Exception as error:
            npu_error = f"the NPU reader failed: {error}"
    return {
        "time": time.time(),
        "cpu_percent": psutil.cpu_percent(interval=None),
        "cpu_count": psutil.cpu_count() or 1,
        "memory_used_mb": (memory.total - memory.available) // (1 << 20),
        "memory_total_mb": memory.total // (1 << 20),
        "gpus": gpus,
        "gpu_error": gpu_error,
        "npus": npus,
        "npu_error": npu_error,
    }


class UsageHistory:
    """Samples of the last 24 hours in a SQLite file (one JSON row per sample)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False)
        with self._lock, self._db:
            self._db.execute("CREATE TABLE IF NOT EXISTS usage (time REAL PRIMARY KEY, sample TEXT NOT NULL)")

    def add(self, record: dict) -> None:
        """Keep a sample and forget those older than 24 hours."""
        with self._lock, self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO usage VALUES (?, ?)", (record["time"], json.dumps(record))
            )
            self._db.execute("DELETE FROM usage WHERE time < ?", (record["time"] - HISTORY_SECONDS,))

    def series(self, since: float | None = None) -> list[dict]:
        """Return the kept samples, oldest first, reduced to the chart's numbers."""
        since = time.time() - HISTORY_SECONDS if since is None else since
        with self._lock:
            rows = self._db.execute(
                "SELECT sample FROM usage WHERE time >= ? ORDER BY time", (since,)
            ).fetchall()
        points = []
        for (text,) in rows:
            record = json.loads(text)
            points.append(
                {
                    "time": record["time"],
                    "cpu": record["cpu_percent"],
                    "memory": 100.0 * record["memory_used_mb"] / max(1, record["memory_total_mb"]),
                    "gpus": [gpu["utilisation"] for gpu in record["gpus"]],
                }
            )
        return points

    def close(self) -> None:
        """Close the file."""
        self._db.close()
