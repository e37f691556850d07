"""The supervisor of one local job: `python -m kpl_lab.engine.supervisor RUN_DIR [--detach] [--adopt]`.

It starts the job's process group under its limits, with stdout and stderr going
straight to output.log (so the job's output never passes through memory here and
the job survives the supervisor), waits for it, enforces stop requests and the
memory watchdog, calls the ingestion callbacks on a timer, and records the end in
status.json before calling the finishing callback. Detached (`--detach`), it forks
away from whoever started it, so a server or CLI that exits leaves it running.
`--adopt` watches a job whose first supervisor died.

Starting the job quickly matters: the local executor runs the supervisor with `python -S`
(no site-packages) through `BOOTSTRAP`, so only the standard library and this package's
light modules load before the job starts; site-packages and the platform (SQLAlchemy)
are loaded at the first tick, while the job runs. It also samples the job's resource
use (`kpl_lab.engine.usage`) every `usage_seconds` and hands the samples to the callbacks.
"""

from __future__ import annotations

import argparse
import contextlib
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
from pathlib import Path

from .identity import Identity
from .launch import JobLaunch
from .limits import JobLimits, group_rss_bytes
from .runfolder import is_alive, job_environment, process_start_time, read_json, write_atomic
from .usage import UsageSampler

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


def tail_lines(path: Path, count: int = LAST_LINES, max_bytes: int = 8192) -> str:
    """Return the last lines of a log file, reading only its end."""
    try:
        with open(path, "rb") as log_file:
            log_file.seek(0, os.SEEK_END)
            size = log_file.tell()
            log_file.seek(max(0, size - max_bytes))
            data = log_file.read()
    except FileNotFoundError:
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


class Supervisor:
    """Own one job's process group from start to recorded end."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.config = read_json(run_dir / "supervisor.json") or {}
        self.launch = JobLaunch.from_json(json.loads((run_dir / "job.json").read_text()))
        self.grace = float(self.config.get("grace_seconds", 10.0))
        self.tick_seconds = float(self.config.get("tick_seconds", 1.0))
        self.usage_seconds = float(self.config.get("usage_seconds", 5.0))
        self.samples: list[dict] = []  # resource samples not yet handed to the callbacks
        self.callbacks = None
        self.wake = False
        self.stopping_since: float | None = None
        self.killed = False
        self.memory_exceeded = False

    def _load_callbacks(self) -> None:
        spec = self.config.get("callbacks")
        if spec:
            enable_site_packages()
            module, _, name = spec.partition(":")
            factory = getattr(importlib.import_module(module), name)
            self.callbacks = factory(self.config.get("callbacks_config") or {})

    def run(self, adopt: bool = False) -> None:
        """Supervise the job to its end and record it."""
        signal.signal(signal.SIGUSR1, self._on_wake)
        if adopt:
            handle = read_json(self.run_dir / "handle.json") or {}
            limits = self._limits_from(handle)
            handle.update(supervisor_pid=os.getpid(), supervisor_start=process_start_time(os.getpid()))
            write_atomic(self.run_dir / "handle.json", json.dumps(handle))
            self._watch(None, handle["pid"], handle["pid_start"], limits)
            self._finish(None, limits, shell=False)
            return
        try:
            argv, shell, env, limits = self._prepare()
        except CommandNotFound as missing:
            self._record(127, f"command not found: {missing}", stopped=False)
            return
        except Exception as error:  # the environment could not be built: say why, as the job's end
            log.exception("could not start the job")
            self._record(None, f"could not start: {error}", stopped=False)
            return
        identity = Identity.from_json(self.config.get("identity"))  # the submitter's account (multi-user)
        with open(self.run_dir / "output.log", "ab") as output:
            try:
                process = subprocess.Popen(
                    argv,
                    cwd=self.launch.algorithm_dir,
                    env=identity.job_env(env) if identity else env,
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    # joins the cgroup before exec (no escape window), then drops to the submitter
                    preexec_fn=identity.preexec(limits.enter) if identity else limits.enter,
                )
            except (FileNotFoundError, PermissionError):
                limits.remove()
                self._record(127, f"command not found: {argv[0]}", stopped=False)
                return
        handle = {
            "supervisor_pid": os.getpid(),
            "supervisor_start": process_start_time(os.getpid()),
            "pid": process.pid,
            "pid_start": process_start_time(process.pid),
            "pgid": process.pid,
            "limits": limits.to_json(),
            "enforcement": limits.enforcement,
            "started": time.time(),
        }
        write_atomic(self.run_dir / "handle.json", json.dumps(handle))
        self._watch(process, process.pid, handle["pid_start"], limits)
        self._finish(process.returncode, limits, shell=shell)

    def _prepare(self) -> tuple[list[str], bool, dict[str, str], JobLimits]:
        env = job_environment(self.launch)
        if self.launch.runs:  # a cached virtual environment built from image.runs
            enable_site_packages()
            from kpl_lab.algorithms.runtime import prepare_runtime

            cache = self.config.get("environments_dir") or str(self.run_dir / "environments")
            with open(self.run_dir / "output.log", "a", encoding="utf-8") as output:
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
        limits = JobLimits.create(
            f"job-{self.launch.job_id}",
            self.launch.limits.memory,
            self.launch.limits.cpu,
            use_cgroups=bool(self.config.get("use_cgroups", True)),
        )
        return argv, shell, env, limits

    def _limits_from(self, handle: dict) -> JobLimits:
        data = handle.get("limits") or {}
        limits = JobLimits(self.launch.limits.memory, self.launch.limits.cpu)
        limits.version = int(data.get("version", 0))
        limits.paths = {k: Path(v) for k, v in data.get("paths", {}).items()}
        limits.enforcement = data.get("enforcement", limits.enforcement)
        return limits

    def _on_wake(self, signum, frame) -> None:
        self.wake = True

    def _watch(
        self, process: subprocess.Popen | None, pid: int, start: int | None, limits: JobLimits
    ) -> None:
        pidfd = os.pidfd_open(pid) if process is not None else None
        # the first tick (loading the platform) waits a tick, so the job starts on a quiet CPU
        last_tick = last_sample = last_look = time.monotonic()
        memory_limit = self.launch.limits.memory * 1024 * 1024
        sampler = UsageSampler(pid, limits.paths, self.launch.assigned_devices.get("gpu"))
        self.samples.append(sampler.sample())
        try:
            while (process.poll() is None) if process is not None else is_alive(pid, start):
                if pidfd is not None:
                    select.select([pidfd], [], [], LOOP_SECONDS)
                else:
                    time.sleep(LOOP_SECONDS)
                self._check_stop(pid)
                if not limits.version and not self.memory_exceeded and group_rss_bytes(pid) > memory_limit:
                    self.memory_exceeded = True
                    self._signal(pid, signal.SIGKILL)
                if time.monotonic() - last_sample >= self.usage_seconds:
                    last_sample = time.monotonic()
                    if sampler.gpu_indexes:
                        enable_site_packages()  # NVML lives in site-packages
                    self.samples.append(sampler.sample())
                elif time.monotonic() - last_look >= PEAK_SECONDS:
                    last_look = time.monotonic()
                    sampler.observe()
                if time.monotonic() - last_tick >= self.tick_seconds:
                    last_tick = time.monotonic()
                    self._tick()
            self.samples.append(sampler.sample())  # the end: nothing left running, the peak kept
        finally:
            sampler.close()
            if pidfd is not None:
                os.close(pidfd)

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

    def _check_stop(self, pgid: int) -> None:
        if self.stopping_since is None:
            request = read_json(self.run_dir / "stop.request")
            if request is None:
                return
            self.grace = float(request.get("grace_seconds", self.grace))
            self.stopping_since = time.monotonic()
            self._signal(pgid, signal.SIGTERM)
        elif not self.killed and time.monotonic() - self.stopping_since >= self.grace:
            self.killed = True
            self._signal(pgid, signal.SIGKILL)

    def _signal(self, pgid: int, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signum)

    def _finish(self, exit_code: int | None, limits: JobLimits, shell: bool) -> None:
        handle = read_json(self.run_dir / "handle.json") or {}
        if handle.get("pgid"):
            self._signal(handle["pgid"], signal.SIGKILL)  # what the job left running in the background
        limits.kill_all()
        oom = self.memory_exceeded or limits.oom_killed()
        for _ in range(50):  # the killed processes take a moment to leave the cgroup
            limits.remove()
            if not any(path.exists() for path in limits.paths.values()):
                break
            time.sleep(0.02)
        lines = tail_lines(self.run_dir / "output.log")
        stopped = self.stopping_since is not None
        if stopped:
            reason = "stopped on request" + (f" (SIGKILL after {self.grace:g} s)" if self.killed else "")
        elif oom:
            how = "" if limits.version else " (RSS watchdog)"
            reason = f"exceeded its memory limit of {self.launch.limits.memory} MB{how}"
        elif exit_code == 0 or exit_code is None:
            reason = ""
        elif exit_code == 127 and shell:
            reason = f"command not found: {_shell_not_found(lines, self.launch.cmd)}"
        elif exit_code < 0:
            reason = f"killed by signal {signal.Signals(-exit_code).name}: {last_line(lines)}".rstrip(": ")
        else:
            reason = f"exited with code {exit_code}: {last_line(lines)}".rstrip(": ")
        self._record(
            exit_code,
            reason,
            stopped=stopped,
            memory_exceeded=oom,
            last_log_lines=lines,
            killed_after_seconds=self.grace if self.killed else None,
        )

    def _record(self, exit_code: int | None, reason: str, stopped: bool, **extra) -> None:
        status = {
            "exit_code": exit_code,
            "reason": reason,
            "stopped": stopped,
            "memory_exceeded": extra.get("memory_exceeded", False),
            "last_log_lines": extra.get("last_log_lines", ""),
            "killed_after_seconds": extra.get("killed_after_seconds"),
            "finished": time.time(),
        }
        write_atomic(self.run_dir / "status.json", json.dumps(status))
        if self.callbacks is None:
            try:
                self._load_callbacks()
            except Exception:
                log.exception("could not load the callbacks")
        self._flush_samples()
        self._call("finish", status)

    def _call(self, name: str, *args) -> None:
        if self.callbacks is None:
            return
        try:
            getattr(self.callbacks, name)(self.launch, *args)
        except Exception:  # ingestion problems are logged; the server's reconcile catches up
            log.exception("callback %s failed", name)


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
    logging.basicConfig(
        stream=sys.stderr, level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s"
    )
    logging.getLogger("kpl_lab").setLevel(logging.INFO)
    Supervisor(args.run_dir).run(adopt=args.adopt)


if __name__ == "__main__":
    main()
