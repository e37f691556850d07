"""Resource use: the one GPU reader (NVML) and the sampler of a running job.

`read_gpus` is the only place NVML is read: the job sampler, the device inventory, the
hub's machine view and the idle culler all call it, and all say `utilization_percent`.

A job's processes are those of its cgroup when it has one (so processes that left its
process group still count), else those of its process group. Only /proc and the cgroup
files are read; NVML is asked about the job's assigned GPUs when a driver is there (no
driver: no GPU figures). Kept free of heavy imports: the supervisor imports it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
HISTORY = 720  # samples kept on the job: an hour at one sample every 5 s


def read_gpus(indexes: Iterable[int] | None = None, nvml: Any = None) -> tuple[list[dict], str | None]:
    """Return each GPU (all, or those of `indexes`) with its use, or ([], why there are none).

    A GPU is `{index, name, utilization_percent, memory_used_mb, memory_total_mb, processes:
    [{pid, memory_mb}]}`; a GPU NVML cannot read is left out (and logged).
    """
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
        for index in range(nvml.nvmlDeviceGetCount()) if indexes is None else indexes:
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                name = nvml.nvmlDeviceGetName(handle)
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                gpus.append(
                    {
                        "index": index,
                        "name": name.decode() if isinstance(name, bytes) else name,
                        "utilization_percent": float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
                        "memory_used_mb": memory.used // (1 << 20),
                        "memory_total_mb": memory.total // (1 << 20),
                        "processes": [
                            {"pid": p.pid, "memory_mb": (p.usedGpuMemory or 0) // (1 << 20)}
                            for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)
                        ],
                    }
                )
            except Exception as error:  # a device gone or unsupported: the others still count
                log.warning("GPU %s: not readable through NVML (%s)", index, error)
        return gpus, None
    finally:
        nvml.nvmlShutdown()


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


class UsageSampler:
    """Sample one job: call `sample()` every few seconds while it runs."""

    def __init__(
        self, pgid: int, cgroup_paths: dict[str, Path] | None = None, gpu_indexes: list[int] | None = None
    ) -> None:
        self.pgid = pgid
        self.paths = {name: Path(path) for name, path in (cgroup_paths or {}).items()}
        self.gpu_indexes = list(gpu_indexes or [])
        self.peak_bytes = 0
        self._last: tuple[float, float] | None = None  # (monotonic time, cpu seconds)
        self._no_gpus = False  # NVML said there are none: not asked again

    def pids(self) -> list[int]:
        """Return the pids of the job's processes."""
        for name in ("unified", "memory", "pids", "cpu"):
            if name in self.paths:
                text = _read(self.paths[name] / "cgroup.procs")
                if text is not None:
                    return [int(pid) for pid in text.split()]
        pids = []
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                stat = _stat_fields(int(entry.name))
                if stat is not None and int(stat[2]) == self.pgid:  # state ppid pgrp ...
                    pids.append(int(entry.name))
        return pids

    def observe(self) -> tuple[list[int], int, float]:
        """Update the peak from the processes now; return their pids, resident bytes and cpu seconds.

        Cheap enough to call between two samples, so a short spike still counts.
        """
        pids = self.pids()
        rss, high_water, cpu_seconds = 0, 0, 0.0
        for pid in pids:
            stat = _stat_fields(pid)
            if stat is None:
                continue  # it ended meanwhile
            # utime stime cutime cstime: fields 14-17, counted here after the name
            cpu_seconds += sum(int(value) for value in stat[11:15]) / CLOCK_TICKS
            statm = _read(Path(f"/proc/{pid}/statm"))
            if statm is not None:
                rss += int(statm.split()[1]) * PAGE_SIZE
            high_water = max(high_water, _high_water_bytes(pid))
        # a single process's kernel high-water mark catches spikes between two looks
        self.peak_bytes = max(self.peak_bytes, rss, high_water)
        return pids, rss, cpu_seconds

    def sample(self) -> dict:
        """Return {time, cpu_percent, memory_mb, peak_memory_mb, processes[, gpus]} for now."""
        pids, rss, cpu_seconds = self.observe()
        cgroup_cpu = self._cgroup_cpu_seconds()
        if cgroup_cpu is not None:
            cpu_seconds = cgroup_cpu  # counts processes that already ended too
        now = time.monotonic()
        cpu_percent = None
        if self._last is not None and now > self._last[0]:
            cpu_percent = max(0.0, 100 * (cpu_seconds - self._last[1]) / (now - self._last[0]))
        self._last = (now, cpu_seconds)
        result = {
            "time": time.time(),
            "cpu_percent": None if cpu_percent is None else round(cpu_percent, 1),
            "memory_mb": round(rss / 2**20, 1),
            "peak_memory_mb": round(self.peak_bytes / 2**20, 1),
            "processes": len(pids),
        }
        gpus = self._gpus(pids)
        if gpus is not None:
            result["gpus"] = gpus
        return result

    def _cgroup_cpu_seconds(self) -> float | None:
        if "unified" in self.paths:
            text = _read(self.paths["unified"] / "cpu.stat")
            for line in (text or "").splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) / 1e6
        if "cpuacct" in self.paths:
            text = _read(self.paths["cpuacct"] / "cpuacct.usage")
            if text is not None:
                return int(text) / 1e9
        return None

    def _gpus(self, pids: list[int]) -> list[dict] | None:
        if not self.gpu_indexes or self._no_gpus:
            return None
        gpus, why = read_gpus(self.gpu_indexes)
        if why is not None:
            self._no_gpus = True
            return None
        mine = set(pids)
        return [
            {
                "index": gpu["index"],
                "utilization_percent": gpu["utilization_percent"],
                "memory_mb": gpu["memory_used_mb"],
                "job_memory_mb": sum(p["memory_mb"] for p in gpu["processes"] if p["pid"] in mine),
            }
            for gpu in gpus
        ]


def _stat_fields(pid: int) -> list[bytes] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _high_water_bytes(pid: int) -> int:
    text = _read(Path(f"/proc/{pid}/status")) or ""
    for line in text.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def combine(samples: list[dict]) -> dict:
    """Return the samples of a job's workers, taken at the same moment, as one sample of the job.

    The peak is the sum of the workers' peaks: an upper bound, as they need not peak together.
    """
    if len(samples) == 1:
        return samples[0]
    cpu = [s["cpu_percent"] for s in samples if s.get("cpu_percent") is not None]
    result = {
        "time": max(s["time"] for s in samples),
        "cpu_percent": round(sum(cpu), 1) if cpu else None,
        "memory_mb": round(sum(s["memory_mb"] for s in samples), 1),
        "peak_memory_mb": round(sum(s["peak_memory_mb"] for s in samples), 1),
        "processes": sum(s["processes"] for s in samples),
    }
    gpus = [gpu for s in samples for gpu in s.get("gpus", [])]
    if gpus:
        result["gpus"] = gpus
    return result


def merge(usage: dict, samples: list[dict], history: int = HISTORY) -> dict:
    """Return a job's usage with new samples added: latest, overall peak, the last `history` samples."""
    if not samples:
        return usage
    kept = [*(usage.get("history") or []), *samples][-history:]
    peak = max([usage.get("peak_memory_mb") or 0.0, *(s.get("peak_memory_mb") or 0.0 for s in samples)])
    return {"latest": samples[-1], "peak_memory_mb": peak, "history": kept}
