"""Run jobs as local processes, each owned by a detached supervisor (`kpl_lab.engine.supervisor`).

The run folder is the interface between this executor, the supervisor and the job
(docs/job-contract.md). Besides the contract's files it holds `supervisor.json` (how to
supervise), `handle.json` (pids and start times, written once the job started),
`stop.request` (asks the supervisor to stop the job) and `status.json` (the end). A job
of several workers has one process group each: rank 0 logs to output.log, the others to
logs/worker-N.log, and handle.json lists them under `workers`.
Supervisors are forked from this process's forkserver (`kpl_lab.engine.forkserver`),
or started as a new Python when it is unavailable.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml
from traitlets import Bool, Dict, Float, List, Unicode

from ..privileged.client import HelperClient
from . import forkserver
from .executor import ExecutionState, Executor
from .forkserver import PACKAGE_PARENT, ForkServerError
from .launch import JobLaunch
from .runfolder import (
    APPEND,
    is_alive,
    left_to_host,
    open_in,
    process_start_time,
    read_own_json,
    worker_log,
    write_atomic,
)
from .spares import SUPERVISOR_FILES, Spares
from .supervisor import BOOTSTRAP

SAFE_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's: a third of the time, on every start
# sh starts the supervisor in the background and prints its pid: nobody waits for Python to start
SPAWN = '"$@" </dev/null >/dev/null & echo $!'  # its stderr (the log) is sh's


def start_detached(argv: list[str], log: Path, what: str, env: dict[str, str] | None = None) -> dict:
    """Start argv in a session of its own with stderr appended to log; return its pid and start time.

    sh puts it in the background and exits at once: it outlives this process (the server, the
    CLI) and nobody has to reap it.
    """
    fd = open_in(log.parent, log.name, APPEND)  # in a run folder of a user's: never through her link
    try:
        done = subprocess.run(
            ["/bin/sh", "-c", SPAWN, "sh", *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=fd,
            start_new_session=True,
            check=False,
            env=env,
            timeout=60,
        )
    finally:
        os.close(fd)
    if done.returncode != 0 or not done.stdout.strip().isdigit():
        raise RuntimeError(f"{what} did not start (exit code {done.returncode}): see {log}")
    pid = int(done.stdout)
    return {"pid": pid, "start": process_start_time(pid)}


# a run folder's files that stay the platform's when the folder becomes its user's: what to run and as
# whom (the supervisor refuses them unless root wrote them), and the supervisor's own
PLATFORM_FILES = ("job.json", "supervisor.json", *SUPERVISOR_FILES)


class LocalExecutor(Executor):
    """Run each job as a process group on this machine, under cgroup limits when writable."""

    use_cgroups = Bool(True, config=True, help="Limit jobs with cgroups when they are writable.")
    grace_seconds = Float(10.0, config=True, help="Seconds between SIGTERM and SIGKILL when stopping.")
    tick_seconds = Float(1.0, config=True, help="Seconds between two event ingestions by the supervisor.")
    usage_seconds = Float(5.0, config=True, help="Seconds between two samples of a job's resource use.")
    python = Unicode(sys.executable, config=True, help="Python that runs the supervisors.")
    use_forkserver = Bool(
        True,
        config=True,
        help="Fork supervisors from a forkserver started once per process (else start each as a new Python).",
    )
    environments_dir = Unicode(
        "", config=True, help="Folder caching the virtual environments built for `image.runs`."
    )
    helper_socket = Unicode(
        "",
        help="The privileged helper's socket (the platform's `Platform.helper_socket`): each job then runs "
        "as the OS account of the user who submitted it, in its project's group (docs/multi-user.md).",
    )
    passed_environment = List(
        Unicode(),
        help="Names of the platform's environment variables jobs also get (`Platform.passed_environment`).",
    )
    platform_home = Unicode(
        "",
        help="The platform's home: while a host listens there (`kpl_lab.rounds`), it records the end of "
        "a job that ended before its supervisor's first tick and left nothing to register.",
    )
    callbacks = Unicode(
        "", help="`module:factory` the supervisor calls with `callbacks_config` to ingest and finish."
    )
    callbacks_config = Dict(help="JSON-serialisable argument of the callbacks factory.")

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._spares = Spares()

    async def before_start(self, launch: JobLaunch) -> None:
        """Create the run folder: job.json, parameter.yml, inputs/ links, outputs/ folders, logs.

        A new run folder is a spare one (`kpl_lab.engine.spares`) filled and renamed into place.
        """
        run_dir = launch.run_dir
        spare = None if run_dir.exists() else self._spares.take(run_dir.parent)
        folder = spare or run_dir
        if not spare:  # a spare one has them
            (folder / "inputs").mkdir(parents=True, exist_ok=True)
            (folder / "outputs").mkdir(exist_ok=True)
        for key, path in launch.inputs.items():
            link = folder / "inputs" / key
            if not link.is_symlink():
                link.symlink_to(Path(path).resolve(), target_is_directory=Path(path).is_dir())
        for key in launch.outputs:
            (folder / "outputs" / key).mkdir(exist_ok=True)
        # in a spare folder nobody sees the files before the rename: no temporary names
        write = (lambda path, text: path.write_text(text)) if spare else write_atomic
        # no fsync: a job whose run folder a crash lost is reported lost (no job.json) by reconcile()
        write(folder / "parameter.yml", yaml.dump(launch.parameters, Dumper=SAFE_DUMPER, allow_unicode=True))
        write(folder / "job.json", json.dumps(launch.to_json(), indent=1))
        supervision = self._supervision()
        if not spare:
            for name in ("output.log", "events.jsonl"):
                (folder / name).touch()
        for rank in range(1, launch.limits.workers):  # made here, so they are given with the folder
            log = worker_log(folder, rank)
            log.parent.mkdir(exist_ok=True)
            log.touch()
        if self.runs_as_user(launch):
            supervision |= self._give_run_folder(launch, folder)
        write(folder / "supervisor.json", json.dumps(supervision))
        if spare:
            try:
                os.rename(spare, run_dir)
            except OSError:  # the run folder appeared meanwhile: fill it the usual way
                shutil.rmtree(spare, ignore_errors=True)
                await self.before_start(launch)

    def _supervision(self) -> dict:
        """Return how a supervisor supervises (supervisor.json), identity aside."""
        return {
            "use_cgroups": self.use_cgroups,
            "grace_seconds": self.grace_seconds,
            "tick_seconds": self.tick_seconds,
            "usage_seconds": self.usage_seconds,
            "environments_dir": self.environments_dir or None,
            "platform_home": self.platform_home or None,
            "callbacks": self.callbacks or None,
            "callbacks_config": self.callbacks_config,
            "passed_environment": list(self.passed_environment),
        }

    async def start(self, launch: JobLaunch) -> dict:
        """Start the job's supervisor and make its run folder at the same time; return the handle.

        The forkserver forks the supervisor and prepares the job's start (command,
        environment, cgroups) while this process makes the run folder; then the
        supervisor starts the job. A run folder that could not be made sends it away.
        Jobs that run as their users' accounts (the identity comes with their run folder)
        and launchers without a forkserver start one step after the other.
        """
        if not self.use_forkserver or self.runs_as_user(launch):
            return await super().start(launch)
        try:
            pending = forkserver.shared(self.python).prepare(
                launch.run_dir, launch.to_json(), self._supervision()
            )
        except ForkServerError as error:
            self.log.warning("preparing the supervisor ahead failed: %s", error)
            return await super().start(launch)
        try:
            await self.before_start(launch)
        except BaseException:
            with contextlib.suppress(ForkServerError):
                pending.abort()
            raise
        try:
            started = pending.go()
        except ForkServerError as error:  # a supervisor that did start finds the run folder claimed
            self.log.warning("the supervisor prepared ahead did not start: %s", error)
            return await self.execute(launch)
        self._spares.make(launch.run_dir.parent)
        return {
            "supervisor_pid": started["pid"],
            "supervisor_start": started["start"],
            "run_dir": str(launch.run_dir),
        }

    def runs_as_user(self, launch: JobLaunch) -> bool:
        """Say whether a job runs as another account than this one: its submitter's, or its project's sandbox."""
        return bool(self.helper_socket)

    @property
    def helper(self) -> HelperClient:
        return HelperClient(self.helper_socket)

    def _give_run_folder(self, launch: JobLaunch, folder: Path) -> dict:
        """Make the run folder the submitter's (or, with none, the project sandbox's); return whom it runs as.

        The platform reads it through its group.

        `folder`: the run folder, or the spare one about to become it. What runs, and as whom,
        stays the platform's (`PLATFORM_FILES`).
        """
        runs_as = self.helper.runs_as(launch.user, launch.project)
        self.helper.give(runs_as["as"], folder, project=launch.project, keep=PLATFORM_FILES)
        return runs_as

    async def execute(self, launch: JobLaunch) -> dict:
        """Start the job's detached supervisor and return its handle; then make the next spare run folder."""
        handle = self._spawn_supervisor(launch.run_dir)
        self._spares.make(launch.run_dir.parent)
        return handle

    def _spawn_supervisor(self, run_dir: Path, adopt: bool = False) -> dict:
        if self.use_forkserver:
            try:
                started = forkserver.shared(self.python).spawn(run_dir, adopt=adopt)
            except ForkServerError as error:
                self.log.warning("starting the supervisor as a new Python: %s", error)
            else:
                return {
                    "supervisor_pid": started["pid"],
                    "supervisor_start": started["start"],
                    "run_dir": str(run_dir),
                }
        # `-S`: no site-packages before the job starts (docs/jobs.md, start latency)
        argv = [self.python, "-S", "-c", BOOTSTRAP, PACKAGE_PARENT, str(run_dir)] + ["--adopt"] * adopt
        started = start_detached(argv, run_dir / "supervisor.log", "the supervisor")
        return {
            "supervisor_pid": started["pid"],
            "supervisor_start": started["start"],
            "run_dir": str(run_dir),
        }

    def _handle(self, launch: JobLaunch, handle: dict) -> dict:
        return {**handle, **(read_own_json(launch.run_dir / "handle.json") or {})}

    async def poll(self, launch: JobLaunch, handle: dict) -> ExecutionState:
        """Return the job's state from its status file, or from /proc while it runs."""
        status = read_own_json(launch.run_dir / "status.json")
        full = self._handle(launch, handle)
        if status is not None:
            return ExecutionState(False, status.get("exit_code"), status.get("reason") or None, full)
        if is_alive(full.get("supervisor_pid"), full.get("supervisor_start")):
            return ExecutionState(True, handle=full)
        if any(is_alive(worker.get("pid"), worker.get("pid_start")) for worker in _workers(full)):
            return ExecutionState(True, reason="its supervisor is gone", handle=full)
        # the supervisor may have written the status between the two reads
        status = read_own_json(launch.run_dir / "status.json")
        if status is not None:
            return ExecutionState(False, status.get("exit_code"), status.get("reason") or None, full)
        return ExecutionState(
            False, None, "lost: the job and its supervisor ended without recording how it ended", full
        )

    async def attach(self, launch: JobLaunch, handle: dict) -> ExecutionState:
        """Re-attach after a restart: adopt a job whose supervisor died, or say it is lost.

        A live supervisor is left alone, even after it wrote status.json: it records the end,
        unless it left the end to the host (`left_to_host`).
        """
        state = await self.poll(launch, handle)
        full = state.handle
        if (
            not state.running
            and is_alive(full.get("supervisor_pid"), full.get("supervisor_start"))
            and left_to_host(launch.run_dir) is None
        ):
            return ExecutionState(True, reason="finishing", handle=full)
        if state.running and state.reason == "its supervisor is gone":
            adopter = self._spawn_supervisor(launch.run_dir, adopt=True)
            return ExecutionState(True, handle={**state.handle, **adopter})
        return state

    async def stop(self, launch: JobLaunch, handle: dict, grace_seconds: float | None = None) -> None:
        """Ask the supervisor to stop the job (SIGTERM, SIGKILL after the grace period)."""
        grace = self.grace_seconds if grace_seconds is None else grace_seconds
        write_atomic(
            launch.run_dir / "stop.request", json.dumps({"grace_seconds": grace, "time": time.time()})
        )
        full = self._handle(launch, handle)
        if is_alive(full.get("supervisor_pid"), full.get("supervisor_start")):
            # a supervisor still starting up has no SIGUSR1 handler yet (the signal would kill
            # it); it reads stop.request right after starting the job
            if full.get("pid") is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(full["supervisor_pid"], signal.SIGUSR1)  # wake it now
        else:  # nobody supervises it: signal the process groups directly (as its user, through the helper)
            supervision = read_own_json(launch.run_dir / "supervisor.json") or {}
            for worker in _workers(full):
                if not is_alive(worker.get("pid"), worker.get("pid_start")):
                    continue
                with contextlib.suppress(ProcessLookupError, OSError):
                    if supervision.get("as"):
                        self.helper.signal(
                            supervision["as"], worker["pgid"], worker["pid_start"], signal.SIGKILL
                        )
                    else:
                        os.killpg(worker["pgid"], signal.SIGKILL)

    async def on_failure(self, launch: JobLaunch, state: ExecutionState) -> None:
        """Remove the cgroups of a job whose supervisor died before cleaning up."""
        mine = not (read_own_json(launch.run_dir / "supervisor.json") or {}).get("as")
        for worker in _workers(read_own_json(launch.run_dir / "handle.json") or {}):
            limits = worker.get("limits") or {}
            if not mine:  # the helper made them
                with contextlib.suppress(OSError):
                    self.helper.release(limits)
                continue
            for path in limits.get("paths", {}).values():
                with contextlib.suppress(OSError):
                    Path(path).rmdir()


def _workers(handle: dict) -> list[dict]:
    """Return the process groups of a job's handle: one per worker (the handle itself for one)."""
    return handle.get("workers") or [handle]
