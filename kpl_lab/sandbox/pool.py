"""The platform's side of the sandbox: workers per project, calls with limits, folders given and taken back.

`Sandbox.call(project, "module:function", *args)` runs a function in one of the project's
workers and returns its JSON answer (or bytes). A call that runs past its time limit, a worker
that runs out of memory or dies, a call whose `stop` event is set: the worker is killed and
the call raises `SandboxFailed` (a `BadRequest`: what the member supplied made it fail) or
`Stopped`. Exceptions the function raised come back as their own type when the platform knows
it (`KPLError`s, `pipelines.sql.Refused`), else as `SandboxFailed`.

With the privileged helper, workers run as the project's sandbox account; what they write
goes into a staging folder the helper gives to that account (`give`) and takes back for the
platform (`adopt`) before it is published.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import importlib
import json
import os
import pickle
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from traitlets import Float, Integer, Unicode
from traitlets.config import LoggingConfigurable

from ..engine import environment
from ..engine.limits import JobLimits
from ..engine.supervisor import Spawned
from ..errors import BadRequest, KPLError
from . import wire

POLL_SECONDS = 0.1  # how often a waiting call looks at its stop event
EXECUTOR_THREADS = 32  # a server's threads waiting on sandboxed calls, of every project
# exceptions a worker's answer may name, rebuilt here by type; any other becomes SandboxFailed
KNOWN_ERRORS = {
    "kpl_lab.errors": ("BadRequest", "NotFound", "Conflict", "Forbidden", "Unavailable", "KPLError"),
    "kpl_lab.pipelines.sql": ("Refused", "TimeLimit"),
}


class SandboxFailed(BadRequest):
    """A sandboxed call failed: past its limits, or its worker died on what it was given."""


class Stopped(Exception):
    """The call's stop event was set: its worker was killed."""


class _Worker:
    """One worker process of a project: its pipes, its process and its limits."""

    def __init__(
        self, project: str, process: Any, writer: int, reader: int, limits: JobLimits | None
    ) -> None:
        self.project = project
        self.process = process
        self.pid: int = process.pid
        self.start: int | None = getattr(process, "start", None)
        self.writer, self.reader = writer, reader
        self.limits = limits
        self.calls = 0
        self.idle_since = time.monotonic()
        self.buffer = b""
        self.dead = False

    def call(
        self,
        header: dict,
        payload: bytes,
        deadline: float,
        stop: threading.Event | None,
        log: Callable[[str], None] | None,
    ) -> tuple[dict, bytes]:
        """Send one call and return its answer frame; raise TimeoutError, Stopped or wire.WireError."""
        self.calls += 1
        data = json.dumps(header).encode()
        self._send(wire.HEAD.pack(len(data), len(payload)) + data + payload, deadline, stop)
        while True:
            answer, data = self._frame(deadline, stop)
            if "log" in answer:
                if log is not None:
                    log(str(answer["log"]))
                continue
            return answer, data

    def _send(self, data: bytes, deadline: float, stop: threading.Event | None) -> None:
        view = memoryview(data)
        os.set_blocking(self.writer, False)
        while view:
            self._wait(self.writer, deadline, stop, writing=True)
            try:
                view = view[os.write(self.writer, view) :]
            except BlockingIOError:
                continue
            except BrokenPipeError:
                raise wire.WireError("the worker went away") from None

    def _frame(self, deadline: float, stop: threading.Event | None) -> tuple[dict, bytes]:
        while True:
            if len(self.buffer) >= wire.HEAD.size:
                head_size, payload_size = wire.HEAD.unpack_from(self.buffer)
                if head_size > wire.MAX_HEADER or payload_size > wire.MAX_PAYLOAD:
                    raise wire.WireError(f"an answer of {head_size + payload_size} bytes is over the limit")
                end = wire.HEAD.size + head_size + payload_size
                if len(self.buffer) >= end:
                    header = self.buffer[wire.HEAD.size : wire.HEAD.size + head_size]
                    payload = self.buffer[wire.HEAD.size + head_size : end]
                    self.buffer = self.buffer[end:]
                    return _loads(header), payload
            self._wait(self.reader, deadline, stop, writing=False)
            chunk = os.read(self.reader, 1 << 20)
            if not chunk:
                raise wire.WireError("the worker ended")
            self.buffer += chunk

    def _wait(self, fd: int, deadline: float, stop: threading.Event | None, writing: bool) -> None:
        while True:
            if stop is not None and stop.is_set():
                raise Stopped
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            ready = (
                select.select([], [fd], [], min(left, POLL_SECONDS))
                if writing
                else select.select([fd], [], [], min(left, POLL_SECONDS))
            )
            if ready[1 if writing else 0]:
                return


def _loads(data: bytes) -> dict:
    try:
        found = json.loads(data)
    except ValueError as error:
        raise wire.WireError(f"not JSON: {error}") from None
    if not isinstance(found, dict):
        raise wire.WireError("an answer's header is a JSON object")
    return found


def rebuild(error: dict) -> Exception:
    """Return the exception a worker's answer describes, as its own type when known here."""
    module, name = str(error.get("module", "")), str(error.get("type", ""))
    message = str(error.get("message") or name)
    if name in KNOWN_ERRORS.get(module, ()):
        kind = getattr(importlib.import_module(module), name)
        if issubclass(kind, KPLError):
            errors = [
                tuple(item) for item in error.get("errors") or [] if isinstance(item, list) and len(item) == 2
            ]
            return kind(message, field=error.get("field"), errors=errors)
        return kind(message)
    return SandboxFailed(f"{name}: {message}")


class Sandbox(LoggingConfigurable):
    """Run member-supplied work in the project's worker processes."""

    memory_mb = Integer(2048, help="Memory of each sandboxed worker (MB); past it, its call fails.").tag(
        config=True
    )
    cpu = Float(0.0, help="CPUs each sandboxed worker may use (0: every CPU of the machine).").tag(
        config=True
    )
    call_seconds = Float(
        300.0, help="Longest a sandboxed call may run unless its caller says otherwise (then it is killed)."
    ).tag(config=True)
    workers_per_project = Integer(4, help="Sandboxed workers one project may have at once.").tag(config=True)
    idle_seconds = Float(
        120.0, help="Seconds an idle sandboxed worker waits for a call before it exits."
    ).tag(config=True)
    max_calls = Integer(500, help="Calls a sandboxed worker answers before a fresh one replaces it.").tag(
        config=True
    )
    python = Unicode(
        sys.executable, help="The Python of the workers (every sandbox account must run it)."
    ).tag(config=True)

    def __init__(self, platform: Any, **kwargs: Any) -> None:
        super().__init__(parent=platform, **kwargs)
        self.platform = platform
        self._lock = threading.Lock()
        self._idle: dict[str, collections.deque[_Worker]] = {}
        self._slots: dict[str, threading.BoundedSemaphore] = {}
        self._ready: set[str] = set()  # projects whose sandbox account the helper made
        self._count = 0
        self._gates: dict[str, asyncio.Semaphore] = {}
        self._executor: ThreadPoolExecutor | None = None

    # for servers: calls off the event loop, a few per project at a time

    @property
    def executor(self) -> ThreadPoolExecutor:
        """Return the threads that wait on sandboxed calls (apart from the server's own pool)."""
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=EXECUTOR_THREADS, thread_name_prefix="kpl-sandbox"
                )
            return self._executor

    async def run(self, project: str, work: Callable[[], Any]) -> Any:
        """Run `work` (which calls the project's sandbox) on `executor`, at most `workers_per_project` at once.

        A project that floods the server with slow calls waits in its own line here and holds
        no thread another project's call needs.
        """
        gate = self._gates.get(project)
        if gate is None:
            gate = self._gates[project] = asyncio.Semaphore(max(1, self.workers_per_project))
        async with gate:
            return await asyncio.get_running_loop().run_in_executor(self.executor, work)

    # calls

    def call(
        self,
        project: str,
        function: str,
        *args: Any,
        what: str = "",
        timeout: float | None = None,
        log: Callable[[str], None] | None = None,
        stop: threading.Event | None = None,
        **kwargs: Any,
    ) -> Any:
        """Return function(*args, **kwargs) run in one of the project's workers (see the module's doc).

        `what` names the work in errors ("the structure of model x:1"); `log` receives the lines
        the function logs (it is given a `log` argument); with `stop` it is given an unset event.
        """
        with self.session(project) as session:
            return session.call(function, *args, what=what, timeout=timeout, log=log, stop=stop, **kwargs)

    @contextlib.contextmanager
    def session(self, project: str) -> Iterator[Session]:
        """Yield a worker of the project for several calls, reset (its kept state closed) afterwards."""
        slots = self._slots_of(project)
        slots.acquire()
        worker = None
        try:
            worker = self._checkout(project)
            session = Session(self, worker)
            yield session
            if session.kept and not worker.dead:
                session.reset()
        finally:
            if worker is not None:
                self._checkin(worker)
            slots.release()

    def _slots_of(self, project: str) -> threading.BoundedSemaphore:
        with self._lock:
            if project not in self._slots:
                self._slots[project] = threading.BoundedSemaphore(max(1, self.workers_per_project))
            return self._slots[project]

    def _checkout(self, project: str) -> _Worker:
        self._reap_idle()
        with self._lock:
            idle = self._idle.setdefault(project, collections.deque())
            while idle:
                worker = idle.pop()
                if worker.process.poll() is None:
                    return worker
                self._close(worker)
        return self._spawn(project)

    def _checkin(self, worker: _Worker) -> None:
        if worker.dead or worker.calls >= self.max_calls or worker.process.poll() is not None:
            self.kill(worker)
            return
        worker.idle_since = time.monotonic()
        with self._lock:
            self._idle.setdefault(worker.project, collections.deque()).append(worker)

    def _reap_idle(self) -> None:
        now = time.monotonic()
        with self._lock:
            stale = [
                worker
                for idle in self._idle.values()
                for worker in idle
                if now - worker.idle_since > self.idle_seconds
            ]
            for idle in self._idle.values():
                for worker in stale:
                    if worker in idle:
                        idle.remove(worker)
        for worker in stale:
            self.kill(worker)

    # processes

    def _spawn(self, project: str) -> _Worker:
        """Start a worker of the project: as its sandbox account through the helper, else as this one."""
        helper = self.platform.helper
        if helper is not None and project not in self._ready:
            helper.project(project)
            self._ready.add(project)
        with self._lock:
            self._count += 1
            name = f"sandbox-{os.getpid()}-{self._count}"
        requests, answers = os.pipe(), os.pipe()
        argv = [self.python, "-m", "kpl_lab.sandbox.worker"]
        env = environment.passed(None, self.platform.passed_environment) | {"HOME": "/nonexistent"}
        cpu = self.cpu or float(os.cpu_count() or 1)
        try:
            if helper is not None:
                process = helper.spawn(
                    {"sandbox": project},
                    argv,
                    env,
                    "/",
                    stdio=(requests[0], answers[1], 2),
                    limits={"name": name, "memory_mb": self.memory_mb, "cpu": cpu},
                    session=True,
                )
                limits = JobLimits.from_json(process.limits, self.memory_mb, cpu) if process.limits else None
            else:
                limits = JobLimits.create(name, self.memory_mb, cpu)
                process = Spawned(
                    os.posix_spawn(
                        argv[0],
                        argv,
                        env,
                        file_actions=[
                            (os.POSIX_SPAWN_DUP2, requests[0], 0),
                            (os.POSIX_SPAWN_DUP2, answers[1], 1),
                        ],
                        setsid=True,
                    )
                )
                try:  # before it reads its first call: nothing of a member's has run in it yet
                    limits.place(process.pid)
                except OSError:
                    os.kill(process.pid, signal.SIGKILL)
                    process.wait()
                    raise
        except BaseException:
            for fd in (*requests, *answers):
                os.close(fd)
            raise
        os.close(requests[0])
        os.close(answers[1])
        return _Worker(project, process, requests[1], answers[0], limits)

    def kill(self, worker: _Worker) -> None:
        """Kill a worker and what it started, release its cgroups and close its pipes."""
        worker.dead = True
        helper = self.platform.helper
        with contextlib.suppress(OSError):
            if helper is not None:
                helper.signal({"sandbox": worker.project}, worker.pid, worker.start, signal.SIGKILL)
                if worker.limits is not None:
                    helper.release(worker.limits.to_json())
            else:
                os.killpg(worker.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            worker.process.wait()
        if helper is None and worker.limits is not None:
            worker.limits.release()
        self._close(worker)

    @staticmethod
    def _close(worker: _Worker) -> None:
        for fd in (worker.writer, worker.reader):
            with contextlib.suppress(OSError):
                os.close(fd)
        worker.writer = worker.reader = -1

    def close(self) -> None:
        """Kill every idle worker (a call in progress ends with its worker)."""
        with self._lock:
            workers = [worker for idle in self._idle.values() for worker in idle]
            self._idle.clear()
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
        for worker in workers:
            self.kill(worker)

    # folders

    def give(self, project: str, folder: Path) -> None:
        """Let the project's workers write in a staging folder the platform made (with the helper)."""
        helper = self.platform.helper
        if helper is not None:
            if project not in self._ready:
                helper.project(project)
                self._ready.add(project)
            helper.give({"sandbox": project}, folder, project=project)

    def adopt(self, project: str, folder: Path) -> None:
        """Make what the project's workers wrote in a staging folder the platform's again (with the helper)."""
        helper = self.platform.helper
        if helper is not None:
            helper.adopt(project, folder)


class Session:
    """A worker checked out for several calls; `Sandbox.session` resets and returns it."""

    def __init__(self, sandbox: Sandbox, worker: _Worker) -> None:
        self.sandbox, self.worker = sandbox, worker
        self.kept = False  # whether the worker keeps state from this session's calls: a reset closes it

    def call(
        self,
        function: str,
        *args: Any,
        what: str = "",
        timeout: float | None = None,
        log: Callable[[str], None] | None = None,
        stop: threading.Event | None = None,
        **kwargs: Any,
    ) -> Any:
        """Return function(*args, **kwargs) run in this session's worker."""
        if self.worker.dead:
            raise SandboxFailed(f"{what or function}: its sandboxed worker is gone")
        what = what or function
        seconds = self.sandbox.call_seconds if timeout is None else timeout
        header = {"call": function, "log": log is not None, "stop": stop is not None}
        try:
            answer, data = self.worker.call(
                header, pickle.dumps((args, kwargs)), time.monotonic() + seconds, stop, log
            )
        except TimeoutError:
            self.sandbox.kill(self.worker)
            raise SandboxFailed(f"{what}: ran past its time limit of {seconds:g} s and was stopped") from None
        except Stopped:
            self.sandbox.kill(self.worker)
            raise
        except (wire.WireError, OSError) as error:
            limits = self.worker.limits
            out_of_memory = limits is not None and limits.oom_killed()  # read before its cgroups go
            self.sandbox.kill(self.worker)
            if out_of_memory:
                raise SandboxFailed(
                    f"{what}: ran out of its memory limit of {self.sandbox.memory_mb} MB and was stopped"
                ) from None
            raise SandboxFailed(f"{what}: its sandboxed worker failed ({error})") from None
        self.kept = self.kept or answer.get("kept", True)
        if "error" in answer:
            raise rebuild(answer["error"] if isinstance(answer["error"], dict) else {})
        return data if answer.get("bytes") else answer.get("result")

    def reset(self) -> None:
        """Close what the calls of this session kept in the worker."""
        try:
            self.worker.call({"reset": True}, b"", time.monotonic() + self.sandbox.call_seconds, None, None)
        except (TimeoutError, wire.WireError, OSError):
            self.sandbox.kill(self.worker)
