"""The supervisor of one local job: `python -m kpl_lab.engine.supervisor RUN_DIR [--detach] [--adopt]`.

It starts the job's process group under its limits (one per worker for a job of several
workers, each with the torch.distributed variables, its own cgroup and log; a failing
worker stops the others and fails the job), with stdout and stderr going
straight to output.log (so the job's output never passes through memory here and
the job survives the supervisor), waits for it, enforces stop requests and the
memory watchdog, calls the ingestion callbacks on a timer, and records the end in
status.json before calling the finishing callback (or, for a job that ended before the
first tick and registers nothing, leaves the end to the platform's host, which it wakes:
`Supervisor._host_records`). Detached (`--detach`), it forks
away from whoever started it, so a server or CLI that exits leaves it running.
`--adopt` watches a job whose first supervisor died.

Starting the job quickly matters: the local executor forks supervisors from a forkserver
(`kpl_lab.engine.forkserver`, which calls `Supervisor.prepare` before forking and
`supervise()` in the child; resource sampling and the handle come after the job's
start), or runs this module with
`python -S` (no site-packages) through `BOOTSTRAP`; either way only the standard library
and this package's light modules are loaded before the job starts; site-packages and the
platform (SQLAlchemy) are loaded at the first tick, while the job runs, unless the
forkserver had them already (it imports them once it served a first job). It also samples the job's resource
use (`kpl_lab.engine.usage`) every `usage_seconds` and hands the samples to the callbacks.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import importlib
import json
import logging
import os
import select
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..privileged.client import HelperClient, HelperError, HelperProcess
from . import environment
from .launch import JobLaunch
from .limits import JobLimits, cgroup_name, group_rss_bytes
from .runfolder import (
    APPEND,
    HOST,
    Refused,
    is_alive,
    job_environment,
    open_in,
    process_start_time,
    read_own_json,
    registers_nothing,
    worker_devices,
    worker_environment,
    worker_log,
    write_atomic,
)
from .usage import UsageSampler, combine

log = logging.getLogger("kpl_lab.engine.supervisor")

LOOP_SECONDS = 0.2
PEAK_SECONDS = 1.0  # between two looks at the job's memory peak (samples are rarer)
# `python -S -c BOOTSTRAP PACKAGE_PARENT RUN_DIR ...`: import this module without site-packages.
BOOTSTRAP = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); "
    "from kpl_lab.engine.supervisor import main; main(sys.argv[1:])"
)
LAST_LINES = 20
SHELL_SYNTAX = set("|&;<>()$`*?~\n")
RESTORED_SIGNALS = (
    signal.SIGPIPE,
    signal.SIGXFSZ,
)  # Python ignores them; a Popen restores them for its child


class CommandNotFound(Exception):
    """The job's command is not an executable file."""


def command_argv(cmd: str, path: str, cwd: Path) -> tuple[list[str], bool]:
    """Return the argv that runs `cmd` and whether it goes through /bin/sh (shell syntax)."""
    words = shlex.split(cmd)
    if not words:
        raise CommandNotFound("(empty command)")
    if SHELL_SYNTAX & set(cmd) or "=" in words[0]:
        return ["/bin/sh", "-c", cmd], True
    program = words[0]
    if "/" in program:
        resolved = cwd / program
        found = str(resolved) if os.access(resolved, os.X_OK) and resolved.is_file() else None
    else:
        found = shutil.which(program, path=path)
    if found is None:
        raise CommandNotFound(program)
    return [found, *words[1:]], False


def enable_site_packages() -> None:
    """Add site-packages to the import path when this Python started with `-S`."""
    if sys.flags.no_site and "site" not in sys.modules:
        import site

        site.main()


def import_callbacks_module(spec: str):
    """Import the module of a callbacks spec (`module:factory`), site-packages first."""
    enable_site_packages()
    return importlib.import_module(spec.partition(":")[0])


def tail_lines(run_dir: Path, path: str | Path, count: int = LAST_LINES, max_bytes: int = 8192) -> str:
    """Return the last lines of a log file of a run folder, reading only its end."""
    try:
        with open(open_in(run_dir, path), "rb") as log_file:
            log_file.seek(0, os.SEEK_END)
            size = log_file.tell()
            log_file.seek(max(0, size - max_bytes))
            data = log_file.read()
    except (FileNotFoundError, Refused):
        return ""
    lines = data.decode("utf-8", "replace").splitlines()
    if size > max_bytes and lines:
        lines = lines[1:]  # the first one is cut
    return "\n".join(lines[-count:])


def last_line(lines: str) -> str:
    """Return the last non-blank line (at most 300 characters)."""
    for line in reversed(lines.splitlines()):
        if line.strip():
            return line.strip()[:300]
    return ""


def _shell_not_found(lines: str, cmd: str) -> str:
    # sh says "sh: 1: NAME: not found" (dash) or "sh: NAME: command not found" (bash)
    for line in reversed(lines.splitlines()):
        if line.endswith("not found"):
            parts = [p.strip() for p in line.split(":")]
            if len(parts) >= 3:
                return parts[-2]
    return cmd.split()[0]


def free_port() -> int:
    """Return a TCP port free on loopback now (the workers' rendezvous port)."""
    import socket  # only jobs of several workers pay for it: one worker starts without it

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Spawned:
    """A job process started with `posix_spawn`: the part of a Popen the supervisor uses."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


def spawn(
    argv: list[str], cwd: Path, env: dict[str, str], output: int, preexec
) -> subprocess.Popen | Spawned:
    """Start a process group with stdout and stderr on `output`, stdin on /dev/null.

    Without a `preexec` step, `posix_spawn` (vfork, no Python between fork and exec, a
    few ms less than a Popen in a supervisor); it has no working folder of its own, so
    this thread steps into `cwd` for the call. Only 0-2 reach the child: the spawn also
    closes each descriptor that is not close-on-exec (`_inheritable`), as a Popen's
    close_fds does. The group is not a session: a setsid in the job's cpu cgroup costs
    2-3 ms (the kernel makes a scheduler autogroup), and the supervisor's session has no
    controlling terminal to detach from.
    """
    if preexec is not None:
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=preexec,
        )
    here = os.open(".", os.O_PATH | os.O_CLOEXEC)
    try:
        os.chdir(cwd)
        pid = os.posix_spawn(
            argv[0],
            argv,
            env,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, output, 1),
                (os.POSIX_SPAWN_DUP2, output, 2),
                *((os.POSIX_SPAWN_CLOSE, fd) for fd in _inheritable() if fd != output),
            ],
            setpgroup=0,
            setsigdef=RESTORED_SIGNALS,
        )
    finally:
        os.fchdir(here)
        os.close(here)
    return Spawned(pid)


def _inheritable() -> list[int]:
    """Return this process's descriptors above 2 that an exec would keep.

    Listed, not raced: a supervisor has one thread when it spawns. Such a descriptor is a
    C library's, or one received without MSG_CMSG_CLOEXEC (SCM_RIGHTS).
    """
    found = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        with contextlib.suppress(OSError):  # the listing's own descriptor, closed by now
            if fd > 2 and os.get_inheritable(fd):
                found.append(fd)
    return found


@dataclass
class Worker:
    """One process group of the job: rank 0 alone, or one of several distributed workers."""

    rank: int
    log: Path
    limits: JobLimits
    devices: dict[str, list[int]] = field(default_factory=dict)
    process: subprocess.Popen | Spawned | None = None  # None when adopted: only its pid is known
    output: int | None = None  # its log while it starts
    pid: int = 0
    pid_start: int | None = None

    @property
    def exit_code(self) -> int | None:
        return self.process.returncode if self.process is not None else None

    def running(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        return is_alive(self.pid, self.pid_start)

    def to_json(self) -> dict:
        return {
            "rank": self.rank,
            "pid": self.pid,
            "pid_start": self.pid_start,
            "pgid": self.pid,
            "limits": self.limits.to_json(),
            "log": str(self.log),
        }


def end_reason(exit_code: int | None, lines: str, shell_cmd: str | None) -> str:
    """Say why a process ended from its exit code and last log lines ("" for a success)."""
    if exit_code == 0 or exit_code is None:
        return ""
    if exit_code == 127 and shell_cmd is not None:
        return f"command not found: {_shell_not_found(lines, shell_cmd)}"
    if exit_code < 0:
        return f"killed by signal {signal.Signals(-exit_code).name}: {last_line(lines)}".rstrip(": ")
    return f"exited with code {exit_code}: {last_line(lines)}".rstrip(": ")


def _own(path: Path) -> dict:
    """Return a file of the platform's that says what to run and as whom; refuse one it did not write.

    A job's run folder is its user's (multi-user): she may replace files in it, never with root's.
    """
    found = read_own_json(path)
    if found is None:
        raise SystemExit(f"{path}: missing, or not written by this account")
    return found


class Supervisor:
    """Own one job's process groups (one per worker) from start to recorded end."""

    def __init__(self, run_dir: Path, launch: JobLaunch | None = None, config: dict | None = None) -> None:
        """Read the job and how to supervise it from the run folder, unless given (a folder still to come)."""
        self.run_dir = run_dir
        self.config = _own(run_dir / "supervisor.json") if config is None else config
        self.launch = launch or JobLaunch.from_json(_own(run_dir / "job.json"))
        self.grace = float(self.config.get("grace_seconds", 10.0))
        self.tick_seconds = float(self.config.get("tick_seconds", 1.0))
        self.usage_seconds = float(self.config.get("usage_seconds", 5.0))
        self.samples: list[dict] = []  # resource samples not yet handed to the callbacks
        self.callbacks = None
        self.wake = False
        self.stopping_since: float | None = None  # a stop request, or a failed worker stopping the rest
        self.stop_requested = False
        self.killed = False
        self.memory_exceeded: int | None = None  # the rank the RSS watchdog killed
        self.failed: Worker | None = None  # the first worker that failed while the others ran
        self.ready: tuple | Exception | None = None  # what `prepare` built, or why it could not
        self.after_start = None  # see `run`
        # a job of a user's runs as her, started and signalled by the privileged helper
        self.runs_as: dict | None = self.config.get("as")
        self.helper = HelperClient(self.config["helper"]) if self.runs_as else None

    def prepare(self, base: dict[str, str], ahead: list[JobLimits] | None = None) -> None:
        """Build the job's command, environment (over `base`) and limits ahead of `run`.

        The forkserver calls it before forking, where the work costs least and the
        supervisor it forks only has to start the job. A failure is kept: `run` records it
        as the job's end. A job whose environment is built from `image.runs` (which can
        take minutes) is left to `run`. `ahead`: cgroups made earlier, taken over by rank
        (`JobLimits.create`); those left over are removed.
        """
        ahead = list(ahead or ())
        try:
            if not self.launch.runs:
                self.ready = self._prepare(base, ahead)
        except Exception as error:
            self.ready = error
        finally:
            for limits in ahead:
                limits.remove()

    def limits(self) -> list[JobLimits]:
        """Return the limits `prepare` made, one per worker (none when it did not make them)."""
        return [worker.limits for worker in self.ready[3]] if isinstance(self.ready, tuple) else []

    def discard(self) -> None:
        """Remove the cgroups `prepare` created for a job this supervisor will not start."""
        for limits in self.limits():
            limits.remove()

    def _load_callbacks(self) -> None:
        spec = self.config.get("callbacks")
        if spec:
            factory = getattr(import_callbacks_module(spec), spec.partition(":")[2])
            self.callbacks = factory(self.config.get("callbacks_config") or {})

    def run(self, adopt: bool = False, after_start=None, after_handle=None) -> None:
        """Supervise the job to its end and record it.

        `after_start` is called once, as soon as the job's processes exist (before this
        thread leaves their cgroups) or once it is clear they will not; `after_handle`
        once handle.json is written (or the start failed), the job's start behind it.
        """
        signal.signal(signal.SIGUSR1, self._on_wake)
        self.after_start = after_start
        try:
            workers, shell = self._start(adopt)
        finally:
            self._started()
        if after_handle is not None:
            after_handle()
        if workers:
            self._watch(workers)
            self._finish(workers, shell=shell)

    def _started(self) -> None:
        if self.after_start is not None:
            after_start, self.after_start = self.after_start, None
            after_start()

    def _start(self, adopt: bool) -> tuple[list[Worker], bool]:
        """Start (or adopt) the job's workers and write the handle; no workers when it could not start."""
        if adopt:
            handle = read_own_json(self.run_dir / "handle.json") or {}
            workers = [
                Worker(
                    rank=int(data.get("rank", 0)),
                    log=worker_log(self.run_dir, int(data.get("rank", 0))),
                    limits=self._limits_from(data),
                    devices=worker_devices(self.launch, int(data.get("rank", 0))),
                    pid=data["pid"],
                    pid_start=data["pid_start"],
                )
                for data in handle.get("workers") or [handle]
            ]
            handle.update(supervisor_pid=os.getpid(), supervisor_start=process_start_time(os.getpid()))
            write_atomic(self.run_dir / "handle.json", json.dumps(handle), durable=False)
            return workers, False
        try:
            if self.ready is None:
                self.ready = self._prepare()
            if isinstance(self.ready, Exception):
                raise self.ready
            argv, shell, env, workers = self.ready
        except CommandNotFound as missing:
            self._started()  # before the callbacks' transaction: the launcher holds the ledger lock
            self._record(127, f"command not found: {missing}", stopped=False)
            return [], False
        except Exception as error:  # the environment could not be built: say why, as the job's end
            log.exception("could not start the job")
            self._started()
            self._record(None, f"could not start: {error}", stopped=False)
            return [], False
        account = self.config.get("account")  # the submitter's account (its name and home), with `as`
        port = free_port() if len(workers) > 1 else 0
        for worker in workers:
            worker_env = env if len(workers) == 1 else worker_environment(env, self.launch, worker.rank, port)
            if account:
                worker_env = environment.for_account(worker_env, account["name"], account["home"])
            try:
                worker.output = open_in(self.run_dir, worker.log, APPEND)
                worker.process = self._spawn(worker, argv, worker_env)
                if worker is workers[-1]:
                    self._started()
            except (FileNotFoundError, PermissionError, Refused, HelperError) as error:
                no_log = worker.output is None  # its log could not be opened: the command was not tried
                for started in workers[: worker.rank]:
                    self._signal(started, signal.SIGKILL)
                    started.process.wait()
                for each in workers:
                    self._release(each)
                    if each.output is not None:
                        os.close(each.output)
                        each.output = None
                self._started()
                if (
                    no_log
                    or isinstance(error, HelperError)
                    and error.errno not in (errno.ENOENT, errno.EACCES)
                ):
                    self._record(None, f"could not start: {error}", stopped=False)
                else:
                    self._record(127, f"command not found: {argv[0]}", stopped=False)
                return [], False
            os.close(worker.output)
            worker.output = None
            worker.pid = worker.process.pid
            worker.pid_start = process_start_time(worker.pid)
        first = workers[0]
        handle = {
            "supervisor_pid": os.getpid(),
            "supervisor_start": process_start_time(os.getpid()),
            "pid": first.pid,
            "pid_start": first.pid_start,
            "pgid": first.pid,
            "limits": first.limits.to_json(),
            "enforcement": first.limits.enforcement,
            "started": time.time(),
        }
        if len(workers) > 1:
            handle.update(workers=[worker.to_json() for worker in workers], master_port=port)
        # pids mean nothing after a reboot: no fsync while the job starts
        write_atomic(self.run_dir / "handle.json", json.dumps(handle), durable=False)
        return workers, shell

    def _prepare(
        self, base: dict[str, str] | None = None, ahead: list[JobLimits] | None = None
    ) -> tuple[list[str], bool, dict[str, str], list[Worker]]:
        env = job_environment(self.launch, base, self.config.get("passed_environment") or ())
        if self.launch.runs:  # a cached virtual environment built from image.runs
            enable_site_packages()
            from kpl_lab.algorithms.runtime import prepare_runtime

            cache = self.config.get("environments_dir") or str(self.run_dir / "environments")
            with open(open_in(self.run_dir, "output.log", APPEND), "a", encoding="utf-8") as output:
                runtime = prepare_runtime(
                    self.launch.runs,
                    cache,
                    log=lambda line: print(line, file=output, flush=True),
                    base_path=env.get("PATH"),
                )
            env.update(runtime.env)
        else:  # the platform's own Python (with kpl_helper) first on PATH, as runtime.platform_runtime does
            env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
        argv, shell = command_argv(self.launch.cmd, env.get("PATH", ""), self.launch.algorithm_dir)
        count = max(1, self.launch.limits.workers)
        made: list[JobLimits] = []
        try:
            for rank in range(count):
                # each worker its own cgroup with the per-worker limits: one cannot starve another
                name = cgroup_name(self.launch.job_id, None if count == 1 else rank)
                if self.runs_as:  # the helper makes them as it starts the worker
                    made.append(JobLimits(self.launch.limits.memory, self.launch.limits.cpu))
                    continue
                made.append(
                    JobLimits.create(
                        name,
                        self.launch.limits.memory,
                        self.launch.limits.cpu,
                        use_cgroups=bool(self.config.get("use_cgroups", True)),
                        ahead=ahead.pop(0) if ahead else None,
                    )
                )
                if made[-1].home is None:  # found already for cgroups made ahead by this thread
                    made[-1].find_home()
        except BaseException:  # the job will not start: no cgroup of an earlier rank is left behind
            for limits in made:
                limits.remove()
            raise
        workers = [
            Worker(rank, worker_log(self.run_dir, rank), limits, worker_devices(self.launch, rank))
            for rank, limits in enumerate(made)
        ]
        return argv, shell, env, workers

    def _limits_from(self, handle: dict) -> JobLimits:
        return JobLimits.from_json(
            handle.get("limits") or {}, self.launch.limits.memory, self.launch.limits.cpu
        )

    def _spawn(self, worker: Worker, argv: list[str], env: dict[str, str]):
        """Start one worker's process group under its limits: as the submitter through the helper, else here."""
        if self.helper is None:
            with worker.limits.starting() as preexec:  # the child is under the limits before exec
                return spawn(argv, self.launch.algorithm_dir, env, worker.output, preexec)
        name = cgroup_name(self.launch.job_id, None if len(self._workers_count()) == 1 else worker.rank)
        with open(os.devnull, "rb") as devnull:
            spawned = self.helper.spawn(
                self.runs_as,
                argv,
                env,
                self.launch.algorithm_dir,
                stdio=(devnull.fileno(), worker.output, worker.output),
                limits={"name": name, "memory_mb": worker.limits.memory_mb, "cpu": worker.limits.cpu}
                if self.config.get("use_cgroups", True)
                else None,
            )
        if spawned.limits:
            worker.limits = JobLimits.from_json(spawned.limits, worker.limits.memory_mb, worker.limits.cpu)
        return spawned

    def _workers_count(self) -> range:
        return range(max(1, self.launch.limits.workers))

    def _signal(self, worker: Worker, signum: int) -> None:
        """Signal a worker's process group (through the helper, as its user, for a user's job)."""
        if self.helper is not None:
            with contextlib.suppress(OSError):  # gone already, or the helper is: nothing to signal
                self.helper.signal(self.runs_as, worker.pid, worker.pid_start, signum)
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(worker.pid, signum)

    def _release(self, worker: Worker) -> None:
        """Kill what is left in a worker's cgroups and remove them."""
        if self.helper is not None:
            with contextlib.suppress(OSError):
                self.helper.release(worker.limits.to_json())
            return
        worker.limits.release()

    def _on_wake(self, signum, frame) -> None:
        self.wake = True

    def _watch(self, workers: list[Worker]) -> None:
        pidfds = {  # readable once the worker ended: its pidfd, or the helper's connection that tells its end
            worker.rank: worker.process.fileno()
            if isinstance(worker.process, HelperProcess)
            else os.pidfd_open(worker.pid)
            for worker in workers
            if worker.process is not None
        }
        # the first tick (loading the platform) waits a tick, so the job starts on a quiet CPU
        last_tick = last_sample = last_look = time.monotonic()
        memory_limit = self.launch.limits.memory * 1024 * 1024
        samplers = [
            UsageSampler(worker.pid, worker.limits.paths, worker.devices.get("gpu")) for worker in workers
        ]
        self.samples.append(combine([sampler.sample() for sampler in samplers]))
        try:
            while running := [worker for worker in workers if worker.running()]:
                waiting = [pidfds[worker.rank] for worker in running if pidfds.get(worker.rank, -1) >= 0]
                if waiting:  # an ended worker's pidfd stays readable: wait on the running ones only
                    select.select(waiting, [], [], LOOP_SECONDS)
                else:
                    time.sleep(LOOP_SECONDS)
                self._check_stop(workers)
                for worker in running:
                    if (
                        not worker.limits.version
                        and self.memory_exceeded is None
                        and group_rss_bytes(worker.pid) > memory_limit
                    ):
                        self.memory_exceeded = worker.rank
                        self._signal(worker, signal.SIGKILL)
                self._check_failed(workers)
                if time.monotonic() - last_sample >= self.usage_seconds:
                    last_sample = time.monotonic()
                    if any(sampler.gpu_indexes for sampler in samplers):
                        enable_site_packages()  # NVML lives in site-packages
                    self.samples.append(combine([sampler.sample() for sampler in samplers]))
                elif time.monotonic() - last_look >= PEAK_SECONDS:
                    last_look = time.monotonic()
                    for sampler in samplers:
                        sampler.observe()
                if time.monotonic() - last_tick >= self.tick_seconds:
                    last_tick = time.monotonic()
                    self._tick()
            # the end: nothing left running, the peak kept
            self.samples.append(combine([sampler.sample() for sampler in samplers]))
        finally:
            for worker in workers:
                if worker.rank in pidfds and not isinstance(worker.process, HelperProcess):
                    os.close(pidfds[worker.rank])

    def _check_failed(self, workers: list[Worker]) -> None:
        """Stop the other workers when one failed: they would wait for it forever."""
        if self.stopping_since is not None or len(workers) == 1:
            return
        for worker in workers:
            if worker.exit_code not in (None, 0) or (
                worker.process is None and self.memory_exceeded == worker.rank
            ):
                self.failed = worker
                self.stopping_since = time.monotonic()
                for other in workers:
                    self._signal(other, signal.SIGTERM)
                return

    def _tick(self) -> None:
        if self.callbacks is None:
            try:
                self._load_callbacks()
            except Exception:  # the platform could not be opened: the job runs on, reconcile catches up
                log.exception("could not load the callbacks")
                return
        self._flush_samples()
        self._call("tick")

    def _flush_samples(self) -> None:
        if self.samples and self.callbacks is not None:
            samples, self.samples = self.samples, []
            self._call("record_usage", samples)

    def _check_stop(self, workers: list[Worker]) -> None:
        if self.stopping_since is None:
            request = read_own_json(self.run_dir / "stop.request")
            if request is None:
                return
            self.grace = float(request.get("grace_seconds", self.grace))
            self.stopping_since = time.monotonic()
            self.stop_requested = True
            for worker in workers:
                self._signal(worker, signal.SIGTERM)
        elif not self.killed and time.monotonic() - self.stopping_since >= self.grace:
            self.killed = True
            for worker in workers:
                self._signal(worker, signal.SIGKILL)

    def _finish(self, workers: list[Worker], shell: bool) -> None:
        for worker in workers:
            self._signal(worker, signal.SIGKILL)  # what the job left running in the background
        oom = [w for w in workers if self.memory_exceeded == w.rank or w.limits.oom_killed()]
        for worker in workers:
            self._release(worker)
        # the worker whose end says why the job ended: the first to fail, else the first that failed
        failing = self.failed or (oom[0] if oom else None)
        if failing is None:
            failing = next((w for w in workers if w.exit_code not in (None, 0)), workers[0])
        exit_code = workers[0].exit_code if self.stop_requested else failing.exit_code
        lines = tail_lines(self.run_dir, failing.log)
        if self.stop_requested:
            reason = "stopped on request" + (f" (SIGKILL after {self.grace:g} s)" if self.killed else "")
        elif failing in oom:
            how = "" if failing.limits.version else " (RSS watchdog)"
            reason = f"exceeded its memory limit of {self.launch.limits.memory} MB{how}"
        else:
            reason = end_reason(exit_code, lines, self.launch.cmd if shell else None)
        if reason and len(workers) > 1 and not self.stop_requested:
            reason = f"worker {failing.rank} {reason}"
        self._record(
            exit_code,
            reason,
            stopped=self.stop_requested,
            memory_exceeded=bool(oom),
            last_log_lines=lines,
            killed_after_seconds=self.grace if self.killed and self.stop_requested else None,
            ran=True,
        )

    def _record(self, exit_code: int | None, reason: str, stopped: bool, **extra) -> None:
        """Write status.json and record the end, or leave it to the platform's host (`_host_records`)."""
        status = {
            "exit_code": exit_code,
            "reason": reason,
            "stopped": stopped,
            "memory_exceeded": extra.get("memory_exceeded", False),
            "last_log_lines": extra.get("last_log_lines", ""),
            "killed_after_seconds": extra.get("killed_after_seconds"),
            "finished": time.time(),
        }
        if extra.get("ran") and self._host_records():
            # its samples go with the status: this process never opened the database
            status.update(recorder=HOST, usage=self.samples)
            self.samples = []
            write_atomic(self.run_dir / "status.json", json.dumps(status))
            from ..rounds import wake

            wake(self.config["platform_home"])  # gone meanwhile: the next host's reconcile records it
            return
        write_atomic(self.run_dir / "status.json", json.dumps(status))
        if self.callbacks is None:
            try:
                self._load_callbacks()
            except Exception:
                log.exception("could not load the callbacks")
        self._flush_samples()
        self._call("finish", status)

    def _host_records(self) -> bool:
        """Say whether the platform's host records the end: it listens, and this process has nothing to open for it.

        A job that ended before the first tick left this process without the platform: opening
        it (SQLAlchemy, the database, its statements compiled anew) would cost more than the
        job, where the host has it open and is woken anyway. Outputs and saves to register are
        copied here as ever, not in the host's round.
        """
        from ..rounds import hosted  # after the job's start: its socket module is not needed before

        home = self.config.get("platform_home")
        return (
            self.callbacks is None
            and bool(home)
            and hosted(home)
            and registers_nothing(self.run_dir, self.launch.outputs)
        )

    def _call(self, name: str, *args) -> None:
        if self.callbacks is None:
            return
        try:
            getattr(self.callbacks, name)(self.launch, *args)
        except Exception:  # ingestion problems are logged; the server's reconcile catches up
            log.exception("callback %s failed", name)


def claim(run_dir: Path) -> bool:
    """Lock the run folder for this process's lifetime; False when another supervisor holds it.

    A launcher that repeats a request its forkserver died answering may start a second
    supervisor for the same job: this makes the second one leave at once.
    """
    fd = open_in(run_dir, "supervisor.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    return True  # the descriptor stays open: the lock ends with this process


def main(argv: list[str] | None = None) -> None:
    """Supervise the job of a run folder."""
    parser = argparse.ArgumentParser(prog="python -m kpl_lab.engine.supervisor")
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--detach", action="store_true", help="fork away, print the supervisor's pid")
    parser.add_argument("--adopt", action="store_true", help="watch a running job whose supervisor died")
    args = parser.parse_args(argv)
    if args.detach:
        pid = os.fork()
        if pid:
            print(pid, flush=True)
            os._exit(0)
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        os.close(devnull)
    configure_logging()
    supervise(args.run_dir, adopt=args.adopt)


def configure_logging() -> None:
    """Log warnings, and this package's information, to stderr (a supervisor's is its supervisor.log)."""
    logging.basicConfig(
        stream=sys.stderr, level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s"
    )
    logging.getLogger("kpl_lab").setLevel(logging.INFO)


def supervise(
    run_dir: Path,
    adopt: bool = False,
    supervisor: Supervisor | None = None,
    after_start=None,
    after_handle=None,
) -> None:
    """Supervise the job of a run folder in this process (the forkserver's entry, `supervisor` prepared).

    `after_start` and `after_handle` are called once each (see `Supervisor.run`).
    """
    if not claim(run_dir):
        log.warning("another supervisor owns %s: leaving the job to it", run_dir)
        if supervisor is not None:
            supervisor.discard()
        for call in (after_start, after_handle):
            if call is not None:
                call()
        return
    (supervisor or Supervisor(run_dir)).run(adopt=adopt, after_start=after_start, after_handle=after_handle)


if __name__ == "__main__":
    main()
