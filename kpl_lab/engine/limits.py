"""Enforce a job's cpu, memory and process limits: a cgroup (v2 or v1) when writable, else a fallback.

The fallback is stated on the job: RLIMIT_DATA caps the heap of each process and a
watchdog sums the resident memory of the process group, killing it past the limit.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PARENT = "kpl-lab"
PIDS_MAX = 4096
CPU_PERIOD_US = 100_000
# Weights under contention: a job weighs as many processes as the CPUs it holds, and all
# jobs together as many as the machine has CPUs; the defaults (one process's weight for
# the whole kpl-lab group) let a busy machine starve a job below what the ledger gave it
# (its start took twice a bare process's at a load of 10)
SHARES_PER_CPU = 1024  # v1 cpu.shares of one process
WEIGHT_PER_CPU = 100  # v2 cpu.weight of one process (1 to 10000)
FALLBACK = "fallback: RLIMIT_DATA + RSS watchdog (cpu not enforced)"
RELEASE_TRIES = 50  # times 20 ms: killed processes take a moment to leave their cgroup


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def _cgroup_v2_root(root: Path) -> Path | None:
    controllers = root / "cgroup.controllers"
    if not controllers.exists() or "memory" not in controllers.read_text().split():
        return None
    return root if os.access(root, os.W_OK) else None


def _cgroup_v1_roots(root: Path) -> dict[str, Path] | None:
    roots = {name: root / name for name in ("memory", "cpu", "pids")}
    if not (roots["memory"] / "memory.limit_in_bytes").exists() or not os.access(roots["memory"], os.W_OK):
        return None
    return {name: path for name, path in roots.items() if path.is_dir() and os.access(path, os.W_OK)}


def _weight(cpus: float) -> str:
    return str(min(10000, max(1, round(cpus * WEIGHT_PER_CPU))))


@dataclass
class JobLimits:
    """The limits applied to one job: cgroup folders to join, or the fallback."""

    memory_mb: int
    cpu: float
    version: int = 0  # 2 or 1 for cgroups, 0 for the fallback
    paths: dict[str, Path] = field(default_factory=dict)  # controller (or "unified") -> job cgroup
    enforcement: str = FALLBACK
    # the starting thread's own cgroups, found ahead (`find_home`): it moves back to them
    home: list[Path] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def create(
        cls,
        name: str,
        memory_mb: int,
        cpu: float,
        use_cgroups: bool = True,
        root: Path = CGROUP_ROOT,
        ahead: JobLimits | None = None,
    ) -> JobLimits:
        """Create the job's cgroup under `kpl-lab` (v2 first, then v1), or choose the fallback.

        `ahead`: v1 cgroups made earlier under another name (`renamable`), renamed and set
        to these limits instead: a rename costs a fifth of making them.
        """
        if ahead is not None:
            if use_cgroups and ahead.renamable:
                with contextlib.suppress(OSError):
                    return ahead._renamed(name, memory_mb, cpu)
            ahead.remove()
        limits = cls(memory_mb=memory_mb, cpu=cpu)
        if not use_cgroups:
            return limits
        try:
            if (v2 := _cgroup_v2_root(root)) is not None:
                limits._create_v2(v2, name)
            elif (v1 := _cgroup_v1_roots(root)) is not None:
                limits._create_v1(v1, name)
        except OSError:
            limits.remove()
            limits.paths, limits.version, limits.enforcement = {}, 0, FALLBACK
        return limits

    @property
    def renamable(self) -> bool:
        """Say whether these are cgroups `create` can take over under another name (v1 renames them; v2 does not)."""
        return self.version == 1

    def _renamed(self, name: str, memory_mb: int, cpu: float) -> JobLimits:
        for controller, path in list(self.paths.items()):
            renamed = path.with_name(name)
            os.rename(path, renamed)
            self.paths[controller] = renamed
        if memory_mb != self.memory_mb:
            raising, self.memory_mb = memory_mb > self.memory_mb, memory_mb
            self._limit_memory_v1(raising)
        if cpu != self.cpu and "cpu" in self.paths:
            self.cpu = cpu
            self._limit_cpu_v1()
        return self

    def _create_v2(self, root: Path, name: str) -> None:
        wanted = {"memory", "cpu", "pids"} & set((root / "cgroup.controllers").read_text().split())
        enable = " ".join(f"+{c}" for c in sorted(wanted))
        _write(root / "cgroup.subtree_control", enable)
        parent = root / PARENT
        parent.mkdir(exist_ok=True)
        _write(parent / "cgroup.subtree_control", enable)
        job = parent / name
        job.mkdir()
        self.paths, self.version = {"unified": job}, 2
        applied = []
        _write(job / "memory.max", str(self.memory_mb * 1024 * 1024))
        applied.append("memory.max")
        if (job / "memory.swap.max").exists():
            _write(job / "memory.swap.max", "0")
        if "cpu" in wanted:
            _write(job / "cpu.max", f"{int(self.cpu * CPU_PERIOD_US)} {CPU_PERIOD_US}")
            with contextlib.suppress(OSError):  # weights help under contention; the limit is cpu.max
                _write(parent / "cpu.weight", _weight(os.cpu_count() or 1))
                _write(job / "cpu.weight", _weight(self.cpu))
            applied.append("cpu.max")
        if "pids" in wanted:
            _write(job / "pids.max", str(PIDS_MAX))
            applied.append("pids.max")
        self.enforcement = "cgroup v2: " + ", ".join(applied)

    def _create_v1(self, roots: dict[str, Path], name: str) -> None:
        self.version = 1
        applied = []
        for controller, root in roots.items():
            job = root / PARENT / name
            job.mkdir(parents=True)
            self.paths[controller] = job
        self._limit_memory_v1()
        applied.append("memory.limit_in_bytes")
        if "cpu" in self.paths:
            self._limit_cpu_v1()
            applied.append("cpu.cfs_quota_us")
        if "pids" in self.paths:
            _write(self.paths["pids"] / "pids.max", str(PIDS_MAX))
            applied.append("pids.max")
        self.enforcement = "cgroup v1: " + ", ".join(applied)

    def _limit_memory_v1(self, raising: bool = False) -> None:
        """Write the memory limit, and memory+swap at the same value: an overrun is killed, not swapped out.

        The kernel keeps memory+swap at or above the memory limit: a raised limit goes second.
        """
        memory = self.paths["memory"]
        limit = str(self.memory_mb * 1024 * 1024)
        if not raising:
            _write(memory / "memory.limit_in_bytes", limit)
        if (memory / "memory.memsw.limit_in_bytes").exists():
            with contextlib.suppress(OSError):
                _write(memory / "memory.memsw.limit_in_bytes", limit)
        if raising:
            _write(memory / "memory.limit_in_bytes", limit)

    def _limit_cpu_v1(self) -> None:
        cpu = self.paths["cpu"]
        _write(cpu / "cpu.cfs_period_us", str(CPU_PERIOD_US))
        _write(cpu / "cpu.cfs_quota_us", str(int(self.cpu * CPU_PERIOD_US)))
        with contextlib.suppress(OSError):  # weights help under contention; the limit is the quota
            _write(cpu.parent / "cpu.shares", str(SHARES_PER_CPU * (os.cpu_count() or 1)))
            _write(cpu / "cpu.shares", str(max(2, int(self.cpu * SHARES_PER_CPU))))

    def enter(self) -> None:
        """Put the calling process under the limits; called in the child before exec."""
        if self.version == 1:
            # "0" in `tasks` moves the calling thread, all of a just-forked child; unlike a pid
            # in cgroup.procs it skips the kernel's global threadgroup lock, whose every take
            # waits for an RCU grace period (about 10 ms, on every job start)
            for path in self.paths.values():
                _write(path / "tasks", "0")
        elif self.version:
            for path in self.paths.values():
                _write(path / "cgroup.procs", str(os.getpid()))
        else:
            limit = self.memory_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))

    def place(self, pid: int) -> None:
        """Put a process just started (and not yet at work) under the limits, from its parent."""
        if self.version:
            for path in self.paths.values():
                _write(path / "cgroup.procs", str(pid))
        else:
            limit = self.memory_mb * 1024 * 1024
            resource.prlimit(pid, resource.RLIMIT_DATA, (limit, limit))

    @contextlib.contextmanager
    def starting(self) -> Iterator[Callable[[], None] | None]:
        """Yield the `preexec_fn` that puts a child started in the block under the limits.

        On cgroup v1 the calling thread joins the job's cgroups for the block instead, and
        the child is born in them: with no `preexec_fn`, Python starts it with vfork rather
        than a fork that runs Python code before exec (several ms per job). When the
        caller's own cgroups are not writable, it could not move back: `enter` it is.
        """
        home = self.home
        if home is None and self.version == 1:
            home = self._own_cgroups_v1()
        if home is None:
            yield self.enter
            return
        for path in self.paths.values():
            _write(path / "tasks", "0")
        try:
            yield None
        finally:
            for tasks in home:
                _write(tasks, "0")

    def find_home(self) -> None:
        """Find the cgroups `starting` moves back to, ahead: this thread's, and so a fork's of it."""
        if self.version == 1:
            self.home = self._own_cgroups_v1()

    def _own_cgroups_v1(self) -> list[Path] | None:
        """Return the `tasks` files of the calling thread's cgroups of the job's hierarchies."""
        mine = {}
        with open(f"/proc/self/task/{threading.get_native_id()}/cgroup") as cgroups:
            for line in cgroups:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                for controller in controllers.split(","):
                    mine[controller] = path
        home = []
        for controller, job in self.paths.items():
            if controller not in mine:
                return None
            tasks = job.parent.parent / mine[controller].lstrip("/") / "tasks"  # hierarchy/kpl-lab/job-x
            if not os.access(tasks, os.W_OK):
                return None
            home.append(tasks)
        return home

    def oom_killed(self) -> bool:
        """Return whether the kernel killed a process of the job for exceeding its memory."""
        try:
            if self.version == 2:
                events = (self.paths["unified"] / "memory.events").read_text()
                return _counter(events, "oom_kill") > 0
            if self.version == 1:
                control = (self.paths["memory"] / "memory.oom_control").read_text()
                return _counter(control, "oom_kill") > 0
        except (OSError, ValueError, KeyError):
            return False
        return False

    def kill_all(self) -> None:
        """SIGKILL every process still in the job's cgroup (those that left its process group too)."""
        for path in self.paths.values():
            if self.version == 2 and (path / "cgroup.kill").exists():
                with contextlib.suppress(OSError):
                    _write(path / "cgroup.kill", "1")
                continue
            with contextlib.suppress(OSError):
                for pid in (path / "cgroup.procs").read_text().split():
                    with contextlib.suppress(ProcessLookupError, ValueError):
                        os.kill(int(pid), signal.SIGKILL)

    def remove(self) -> None:
        """Remove the job's cgroup folders (they must be empty of processes)."""
        for path in self.paths.values():
            with contextlib.suppress(OSError):
                path.rmdir()

    def release(self) -> None:
        """Kill what is left in the job's cgroups and remove them, once the killed processes left them."""
        self.kill_all()
        for _ in range(RELEASE_TRIES):
            self.remove()
            if not any(path.exists() for path in self.paths.values()):
                return
            time.sleep(0.02)

    def to_json(self) -> dict:
        return {
            "version": self.version,
            "paths": {k: str(v) for k, v in self.paths.items()},
            "enforcement": self.enforcement,
        }

    @classmethod
    def from_json(cls, data: dict, memory_mb: int, cpu: float) -> JobLimits:
        """Return the limits `to_json` described (made elsewhere: by a supervisor before, or the helper)."""
        return cls(
            memory_mb,
            cpu,
            version=int(data.get("version", 0)),
            paths={k: Path(v) for k, v in data.get("paths", {}).items()},
            enforcement=data.get("enforcement", FALLBACK),
        )


def cgroup_name(job_id: str, worker: int | str | None = None) -> str:
    """Return the cgroup name of a job, or of one of its workers (`worker="*"`: a glob of them all)."""
    return f"job-{job_id}" if worker is None else f"job-{job_id}-worker-{worker}"


def remove_cgroups(pattern: str, root: Path = CGROUP_ROOT) -> None:
    """Remove the empty job cgroups whose names match `pattern` (a glob) in every hierarchy: a killed process's."""
    for path in (*root.glob(f"{PARENT}/{pattern}"), *root.glob(f"*/{PARENT}/{pattern}")):
        with contextlib.suppress(OSError):
            path.rmdir()


def _counter(text: str, name: str) -> int:
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == name:
            return int(value)
    return 0


def group_rss_bytes(pgid: int) -> int:
    """Return the summed resident memory of every process in a process group."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
            if int(fields[2]) != pgid:  # fields after the name: state ppid pgrp ...
                continue
            with open(f"/proc/{entry.name}/statm", "rb") as statm:
                total += int(statm.read().split()[1]) * resource.getpagesize()
        except (OSError, IndexError, ValueError):
            continue
    return total
