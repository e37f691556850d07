"""Sample the resources a running job uses: cpu %, resident memory and its peak, its GPUs.

The job's processes are those of its cgroup when it has one (so processes that left its
process group still count), else those of its process group. Only /proc and the cgroup
files are read; NVML is asked about the job's assigned GPUs when a driver is there (no
driver: no GPU figures). Kept free of heavy imports: the supervisor imports it.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
HISTORY = 720  # samples kept on the job: an hour at one sample every 5 s


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
        self._nvml = None  # the module once initialised, False when there is no driver

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
        if not self.gpu_indexes or self._nvml is False:
            return None
        try:
            if self._nvml is None:
                import pynvml

                pynvml.nvmlInit()
                self._nvml = pynvml
            nvml = self._nvml
            mine = set(pids)
            gpus = []
            for index in self.gpu_indexes:
                device = nvml.nvmlDeviceGetHandleByIndex(index)
                rates = nvml.nvmlDeviceGetUtilizationRates(device)
                memory = nvml.nvmlDeviceGetMemoryInfo(device)
                job_bytes = sum(
                    process.usedGpuMemory or 0
                    for process in nvml.nvmlDeviceGetComputeRunningProcesses(device)
                    if process.pid in mine
                )
                gpus.append(
                    {
                        "index": index,
                        "utilization_percent": rates.gpu,
                        "memory_mb": round(memory.used / 2**20, 1),
                        "job_memory_mb": round(job_bytes / 2**20, 1),
                    }
                )
            return gpus
        except Exception:  # no driver, no library, a device gone: no GPU figures
            self._nvml = False
            return None

    def close(self) -> None:
        """Release NVML."""
        if self._nvml:
            with contextlib.suppress(Exception):  # already shut down, or the driver went away
                self._nvml.nvmlShutdown()
        self._nvml = None


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
