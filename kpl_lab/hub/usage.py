"""Live use of the machine (CPU, memory, each GPU and NPU) and its 24-hour history.

GPUs are read by the one NVML reader (`kpl_lab.engine.usage.read_gpus`), each with its
`utilization_percent`, memory and the users of its processes; NPUs through a pluggable reader
(a callable returning a list of dicts in the same words). A machine without GPUs says so
(`gpu_error`). Samples are kept 24 hours in a SQLite file.
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

from ..engine.usage import read_gpus

HISTORY_SECONDS = 24 * 3600
NpuReader = Callable[[], list[dict]]


def _owner(pid: int) -> str:
    """Return the user of a process: its KPL user (JUPYTERHUB_USER) or its system user."""
    try:
        process = psutil.Process(pid)
        return process.environ().get("JUPYTERHUB_USER") or process.username()
    except (psutil.Error, OSError):
        return f"pid {pid}"


def sample(nvml: Any = None, npu_reader: NpuReader | None = None) -> dict:
    """Return one sample of the machine's use now."""
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
                    # samples kept from before the word was `utilization_percent` count as idle
                    "gpus": [gpu.get("utilization_percent", 0.0) for gpu in record["gpus"]],
                }
            )
        return points

    def close(self) -> None:
        """Close the file."""
        self._db.close()
