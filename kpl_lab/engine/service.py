"""Jobs: submit, schedule onto the ledger, run through an executor, ingest events, finish.

A job is `queued` until the ledger can hold its resources, then `running` (its
reservation and device indexes written in the same locked transaction), then
`succeeded`, `failed`, `stopped` or `lost`. The events file in the run folder is the
durable record: ingestion remembers its byte offset in the job row, in the same
transaction as the metric points, so ingesting twice never duplicates a point.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import secrets
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import func, insert, select
from sqlalchemy.orm import joinedload
from traitlets import Float, Integer, Type
from traitlets.config import Config, LoggingConfigurable
from traitlets.config.loader import DeferredConfigString

from ..catalog.jobs import FINAL_STATES, Job, Metric
from ..catalog.models import Project
from ..catalog.storage import check_name
from ..errors import BadRequest, Conflict, Forbidden, KPLError, NotFound
from . import envelope, usage
from .executor import ExecutionState, Executor
from .launch import JobLaunch, Resources
from .ledger import Ledger
from .local import LocalExecutor
from .runfolder import read_json
from .supervisor import last_line, tail_lines

if TYPE_CHECKING:
    from ..platform import Platform

EVENT_BATCH_BYTES = 4 * 1024 * 1024  # events read per ingestion transaction
LOG_CHUNK = 64 * 1024
FOLLOW_POLL_SECONDS = 0.2
CONFIG_SECTIONS = ("Platform", "JobService", "Ledger", "LocalExecutor")
ALGORITHM_CACHE = 32


class ResourceRequest(BaseModel):
    """Resource overrides of a job; None keeps the algorithm's environment.yml value."""

    model_config = ConfigDict(extra="forbid")

    cpu: float | None = Field(default=None, gt=0)
    memory: int | None = Field(default=None, gt=0)
    shm: int | None = Field(default=None, ge=0)
    gpu: int | None = Field(default=None, ge=0)
    npu: int | None = Field(default=None, ge=0)


class JobRequest(BaseModel):
    """What to run: one function of an algorithm with inputs, parameters and resources."""

    model_config = ConfigDict(extra="forbid")

    project: str = "default"
    algorithm: str  # NAME or NAME:VERSION
    function: str = "train"
    inputs: dict[str, str] = Field(default_factory=dict)  # key -> dataset/model ref
    parameters: dict[str, Any] = Field(default_factory=dict)  # name (dotted or nested) -> value
    resources: ResourceRequest | None = None
    priority: int = 0


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _timestamp(moment: datetime | None) -> float | None:
    if moment is None:
        return None
    if moment.tzinfo is None:  # SQLite gives naive datetimes back
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def run_sync(coroutine):
    """Run an executor coroutine from synchronous code, inside or outside an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    result: dict = {}

    def target() -> None:
        try:
            result["value"] = asyncio.run(coroutine)
        except BaseException as error:
            result["error"] = error

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result.get("value")


class JobService(LoggingConfigurable):
    """Submit, schedule, watch and stop the jobs of every project.

    Every session that reads a row and then writes it is immediate: SQLite in WAL mode
    refuses a deferred transaction whose snapshot went stale instead of waiting for it.
    """

    executor_class = Type(LocalExecutor, klass=Executor, help="Executor that runs jobs.").tag(config=True)
    grace_seconds = Float(10.0, help="Seconds between SIGTERM and SIGKILL when a job is stopped.").tag(
        config=True
    )
    default_cpu = Float(1.0, help="CPUs of a job whose environment.yml names none.").tag(config=True)
    default_memory = Integer(1024, help="Memory (MB) of a job whose environment.yml names none.").tag(
        config=True
    )

    def __init__(self, platform: Platform, **kwargs) -> None:
        super().__init__(parent=platform, **kwargs)
        self.platform = platform
        self.ledger = Ledger(platform)
        self.executor = self.executor_class(parent=self)
        # local jobs have a supervisor each; the others are polled by `tick()`
        self.supervised = isinstance(self.executor, LocalExecutor)
        self._algorithms: dict[tuple, Any] = {}  # parsed algorithm versions (immutable)
        if self.supervised:
            self.executor.grace_seconds = self.grace_seconds
            self.executor.environments_dir = str(Path(platform.home) / "environments")
            self.executor.users_dir = str(Path(platform.home) / "users")
            self.executor.callbacks = "kpl_lab.engine.service:supervisor_callbacks"
            self.executor.callbacks_config = self._platform_config()

    def _platform_config(self) -> dict:
        """Return what a supervisor needs to open the same platform (JSON-serialisable)."""
        live = {
            "Platform": self.platform,
            "JobService": self,
            "Ledger": self.ledger,
            "LocalExecutor": self.executor,
        }
        config = {}
        for name in CONFIG_SECTIONS:
            section = dict(self.platform.config.get(name, {}))
            # a command-line value (`--LocalExecutor.run_as_users=True`) is text until a trait reads it
            for key, value in section.items():
                if isinstance(value, DeferredConfigString) and live[name].has_trait(key):
                    section[key] = live[name].traits()[key].from_string(value)
            if section:
                config[name] = section
        config = json.loads(json.dumps(config, default=str))
        config.setdefault("Platform", {}).update(
            home=self.platform.home,
            storage_url=self.platform.storage_url,
            database_url=self.platform.database_url,
        )
        return config

    # submitting

    def submit(
        self,
        request: JobRequest,
        copied_from: str | None = None,
        resumed_from: str | None = None,
        user: str = "",
    ) -> Job:
        """Check and queue a job, then start it at once if it fits; refuse what can never fit.

        `user`: the hub user who submits it; the job runs as their OS account where the
        executor runs jobs as their users (docs/multi-user.md).
        """
        from ..algorithms.errors import AlgorithmError, ParameterError
        from ..algorithms.parameters import apply_overrides

        catalog = self.platform.catalog
        project = check_name(request.project, "project")
        version = catalog.get_algorithm(project, request.algorithm)
        algorithm = self._read_algorithm(version)
        try:
            function = algorithm.spec.function(request.function)
        except AlgorithmError as error:
            raise BadRequest(str(error), field="function") from error
        declared = {port.key for port in function.inputs}
        inputs = {}
        for key, ref in request.inputs.items():
            if key not in declared:
                known = ", ".join(sorted(declared)) or "none"
                raise BadRequest(
                    f"input {key!r}: the {request.function} function of {version.ref} has no such input "
                    f"(inputs: {known})",
                    field=f"inputs.{key}",
                )
            try:
                kind, row, _ = catalog.resolve_input(project, ref)
            except KPLError as error:
                raise type(error)(f"input {key!r}: {error.message}", field=f"inputs.{key}") from error
            inputs[key] = {"ref": ref, "kind": kind, "version_id": row.id, "version": row.ref}
        try:
            parameters = apply_overrides(version.parameters or {}, request.parameters)
        except ParameterError as error:
            raise BadRequest(str(error), field="parameters") from error
        limits = function.launch_resources(Resources(cpu=self.default_cpu, memory=self.default_memory))
        overrides = request.resources.model_dump(exclude_none=True) if request.resources else {}
        for kind in ("gpu", "npu"):
            if kind in overrides:
                limits.devices[kind] = overrides.pop(kind)
        for name, value in overrides.items():
            setattr(limits, name, value)
        limits.devices = {kind: count for kind, count in limits.devices.items() if count}
        self.ledger.check(project, limits)
        requests = None
        if function.resource.requests is not None:
            asked = function.resource.requests
            requests = _resources_json(
                Resources(
                    cpu=asked.cpu or limits.cpu,
                    memory=asked.memory or limits.memory,
                    shm=asked.shm or limits.shm,
                    devices=dict(limits.devices),
                )
            )
        outputs = {port.key: {"name": port.name, "registered": None} for port in function.outputs}
        with self.platform.session(immediate=True) as session:
            proj = catalog.ensure_project(session, project)
            job = Job(
                id=self._new_id(session),
                project_id=proj.id,
                algorithm_version_id=version.id,
                algorithm_ref=version.ref,
                function=request.function,
                user=user,
                priority=request.priority,
                inputs=inputs,
                parameters=parameters,
                outputs=outputs,
                limits=_resources_json(limits),
                requests=requests,
                executor="local"
                if isinstance(self.executor, LocalExecutor)
                else type(self.executor).__name__,
                copied_from=copied_from,
                resumed_from=resumed_from,
            )
            session.add(job)
            job_id = job.id
        self.schedule()
        return self.get(project, job_id)

    def _new_id(self, session) -> str:
        while True:
            job_id = secrets.token_hex(5)
            if session.get(Job, job_id) is None:
                return job_id

    def _request_of(self, job: Job) -> JobRequest:
        """Return the request that runs the same thing again (pinned versions, same parameters)."""
        return JobRequest(
            project=job.project.name,
            algorithm=job.algorithm_ref,
            function=job.function,
            inputs={key: f"{spec['kind']}:{spec['version']}" for key, spec in job.inputs.items()},
            parameters=job.parameters,
            resources=ResourceRequest(
                cpu=job.limits.get("cpu"),
                memory=job.limits.get("memory"),
                shm=job.limits.get("shm"),
                gpu=job.limits.get("devices", {}).get("gpu", 0),
                npu=job.limits.get("devices", {}).get("npu", 0),
            ),
            priority=job.priority,
        )

    def rerun(self, project: str, job_id: str, user: str = "") -> Job:
        """Run the same algorithm version, inputs, parameters and resources again (as `user`)."""
        job = self.get(project, job_id)
        return self.submit(self._request_of(job), copied_from=job.id, user=user)

    def copy(
        self,
        project: str,
        job_id: str,
        parameters: dict | None = None,
        resources: dict | None = None,
        user: str = "",
    ) -> Job:
        """Run a job again with some parameters or resources changed."""
        job = self.get(project, job_id)
        request = self._request_of(job)
        if parameters:
            request.parameters = {**request.parameters, **parameters}
        if resources:
            merged = request.resources.model_dump() | resources
            request.resources = ResourceRequest(**merged)
        return self.submit(request, copied_from=job.id, user=user)

    def resume(self, project: str, job_id: str, parameters: dict | None = None, user: str = "") -> Job:
        """Run a copy whose `checkpoint` (or first model) input is the model this job produced."""
        job = self.get(project, job_id)
        produced = [
            o["registered"] for o in job.outputs.values() if (o.get("registered") or "").startswith("model:")
        ]
        produced += [s["registered"] for s in job.saves if (s.get("registered") or "").startswith("model:")]
        if not produced:
            raise BadRequest(f"job {job_id} registered no model to resume from (state: {job.state})")
        algorithm = self.platform.catalog.read_algorithm(job.algorithm_version)
        ports = [port.key for port in algorithm.spec.function(job.function).inputs]
        if "checkpoint" in ports:
            key = "checkpoint"
        else:
            models = [k for k in ports if job.inputs.get(k, {}).get("kind") == "model"]
            if not models:
                raise BadRequest(
                    f"the {job.function} function of {job.algorithm_ref} has no 'checkpoint' or model input "
                    "to resume from",
                    field="inputs",
                )
            key = models[0]
        request = self._request_of(job)
        request.inputs[key] = produced[0]
        if parameters:
            request.parameters = {**request.parameters, **parameters}
        return self.submit(request, resumed_from=job.id, user=user)

    # scheduling

    def schedule(self) -> list[str]:
        """Start the queued jobs that fit, by priority then age; return their ids."""
        started = []
        with self.ledger.locked() as session:
            queued = session.scalars(
                select(Job)
                .options(joinedload(Job.project))
                .where(Job.state == "queued")
                .order_by(Job.priority.desc(), Job.created, Job.id)
            ).all()
            waiting_projects: set[str] = set()
            for job in queued:
                project = job.project.name
                if project in waiting_projects:
                    continue  # first come, first served within a project
                reservation = self.ledger.try_reserve(session, project, "job", job.id, _resources(job.limits))
                if reservation is None:
                    waiting_projects.add(project)
                    continue
                job.state, job.started, job.assigned_devices = "running", _now(), reservation.devices
                started.append(job.id)
        for job_id in started:
            self._launch(job_id)
        return started

    def _read_algorithm(self, version):
        """Return a parsed algorithm version, parsed once: submit and launch both need it."""
        key = (version.id, version.path)  # ids can be reused after a delete; paths name the content
        if key not in self._algorithms:
            if len(self._algorithms) >= ALGORITHM_CACHE:
                self._algorithms.pop(next(iter(self._algorithms)), None)
            self._algorithms[key] = self.platform.catalog.read_algorithm(version)
        return self._algorithms[key]

    def _launch_of(self, job: Job) -> JobLaunch:
        catalog = self.platform.catalog
        algorithm = self._read_algorithm(job.algorithm_version)
        function = algorithm.spec.function(job.function)
        inputs = {}
        for key, spec in job.inputs.items():
            _, _, path = catalog.resolve_input(job.project.name, f"{spec['kind']}:{spec['version']}")
            inputs[key] = path
        limits = _resources(job.limits)
        return JobLaunch(
            job_id=job.id,
            project=job.project.name,
            function=job.function,
            user=job.user,
            cmd=function.cmd,
            algorithm_dir=catalog.path(job.algorithm_version),
            run_dir=self.run_dir(job),
            image=algorithm.spec.image.from_image,
            runs=list(algorithm.spec.image.runs),
            inputs=inputs,
            outputs=list(job.outputs),
            parameters=job.parameters,
            limits=limits,
            requests=_resources(job.requests) if job.requests else None,
            # a cluster's device plugin picks the devices: the local indexes mean nothing there
            assigned_devices=job.assigned_devices if self.supervised else {},
        )

    def _launch(self, job_id: str) -> None:
        job = self._job(job_id)
        try:
            launch = self._launch_of(job)
            run_sync(self.executor.before_start(launch))
            handle = run_sync(self.executor.execute(launch))
        except Exception as error:
            self.log.exception("job %s could not start", job_id)
            self._end(job_id, "failed", reason=f"could not start: {error}")
            return
        with self.platform.session(immediate=True) as session:
            row = session.get(Job, job_id)
            row.handle = {**(row.handle or {}), **handle}

    # reading

    def run_dir(self, job: Job) -> Path:
        """Return a job's run folder."""
        return self.platform.storage.job_dir(job.project.name, job.id)

    def _job(self, job_id: str) -> Job:
        with self.platform.session() as session:
            job = session.scalar(
                select(Job)
                .options(joinedload(Job.project), joinedload(Job.algorithm_version))
                .where(Job.id == job_id)
            )
            if job is None:
                raise NotFound(f"job {job_id!r} not found")
            return job

    def get(self, project: str, job_id: str) -> Job:
        """Return one job of a project."""
        job = self._job(job_id) if isinstance(job_id, str) and job_id else None
        if job is None or job.project.name != project:
            raise NotFound(f"job {job_id!r} not found in project {project!r}")
        return job

    def list(self, project: str, state: str | None = None) -> list[Job]:
        """Return a project's jobs, newest first, optionally in one state."""
        with self.platform.session() as session:
            query = (
                select(Job)
                .join(Project)
                .options(joinedload(Job.project), joinedload(Job.algorithm_version))
                .where(Project.name == project)
                .order_by(Job.created.desc(), Job.id)
            )
            if state is not None:
                query = query.where(Job.state == state)
            return list(session.scalars(query))

    def progress(self, project: str, job_id: str) -> tuple[float, float | None]:
        """Return the fraction done and the seconds left (None when unknown)."""
        job = self.get(project, job_id)
        if job.state == "succeeded":
            return 1.0, 0.0
        if job.eta_seconds is None or job.progress_time is None:
            return job.progress, None
        if job.is_final:
            return job.progress, None
        return job.progress, max(0.0, job.eta_seconds - (time.time() - job.progress_time))

    def follow_logs(self, project: str, job_id: str, follow: bool = False) -> Iterator[str]:
        """Yield the job's output line by line (long lines in pieces); with `follow`, until it ends."""
        job = self.get(project, job_id)
        path = self.run_dir(job) / "output.log"
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        pending = ""
        while not path.exists():
            if not follow or self.get(project, job_id).is_final:
                return
            time.sleep(FOLLOW_POLL_SECONDS)
        with open(path, "rb") as log:
            while True:
                chunk = log.read(LOG_CHUNK)
                if chunk:
                    pending += decoder.decode(chunk)
                    *lines, pending = pending.split("\n")
                    yield from lines
                    if len(pending) > LOG_CHUNK:
                        yield pending
                        pending = ""
                    continue
                if not follow:
                    break
                if self.get(project, job_id).is_final:
                    chunk = log.read(LOG_CHUNK)
                    if chunk:  # written between the last read and the end
                        log.seek(-len(chunk), 1)
                        continue
                    break
                time.sleep(FOLLOW_POLL_SECONDS)
        pending += decoder.decode(b"", final=True)
        if pending:
            yield pending

    def metrics(
        self, project: str, job_id: str, max_points: int = 1000
    ) -> dict[str, list[tuple[float, float]]]:
        """Return each series' points, at most `max_points` (the lowest and highest of each bucket).

        A series is named by its series name, or `figure/series` when two figures share a name.
        Long series are read from their envelope (kept by ingestion), never point by point.
        """
        job = self.get(project, job_id)
        curves = [
            (figure, series, curve)
            for figure, fields in sorted(job.figures.items())
            for series, curve in fields.get("envelopes", {}).items()
        ]
        names = [series for _, series, _ in curves]
        result = {}
        with self.platform.session() as session:
            for figure, series, curve in curves:
                key = series if names.count(series) == 1 else f"{figure}/{series}"
                if curve["count"] > max_points:
                    result[key] = envelope.points(curve, max_points)
                    continue
                rows = session.execute(
                    select(Metric.x, Metric.value)
                    .where(Metric.job_id == job.id, Metric.series == series, Metric.figure == figure)
                    .order_by(Metric.step)
                )
                result[key] = [(float(x), float(y)) for x, y in rows]
        return result

    # ingesting events

    def ingest(self, job_id: str) -> bool:
        """Read new events of a job into the database; return whether the job asked to be stopped."""
        job = self._job(job_id)
        path = self.run_dir(job) / "events.jsonl"
        asked_stop = False
        while True:
            with self.platform.session(immediate=True) as session:
                row = session.get(Job, job_id)
                offset = row.events_offset
                try:
                    with open(path, "rb") as events:
                        events.seek(offset)
                        data = events.read(EVENT_BATCH_BYTES)
                except FileNotFoundError:
                    return asked_stop
                end = data.rfind(b"\n")
                if end < 0:
                    if len(data) < EVENT_BATCH_BYTES:
                        return asked_stop  # only a partial line so far
                    row.events_invalid += 1  # one line larger than a batch: skip it
                    row.events_offset = offset + len(data)
                    continue
                asked_stop |= self._apply_events(session, row, data[: end + 1].splitlines())
                row.events_offset = offset + end + 1
                if len(data) < EVENT_BATCH_BYTES:
                    return asked_stop

    def _apply_events(self, session, job: Job, lines: list[bytes]) -> bool:
        steps = {
            (figure, series): step
            for figure, series, step in session.execute(
                select(Metric.figure, Metric.series, func.max(Metric.step))
                .where(Metric.job_id == job.id)
                .group_by(Metric.figure, Metric.series)
            )
        }
        points, asked_stop, invalid = [], False, 0
        figures, results, saves, handle = (
            json.loads(json.dumps(job.figures)),  # a deep copy, so the JSON column sees the change
            list(job.results),
            list(job.saves),
            dict(job.handle),
        )
        for line in lines:
            try:
                event = json.loads(line)
                kind, moment = event["type"], float(event.get("time") or time.time())
            except (ValueError, KeyError, TypeError):
                invalid += 1
                continue
            if kind == "metric":
                title = str(event.get("title", ""))
                try:
                    x = float(event["x"])
                except (KeyError, TypeError, ValueError):
                    invalid += 1
                    continue
                for series, value in (event.get("values") or {}).items():
                    if isinstance(value, bool) or not isinstance(value, (int, float)):
                        continue  # null for nan/inf: kept in the events file, not plotted
                    key = (title, str(series))
                    step = steps[key] = steps.get(key, -1) + 1
                    curve = figures.setdefault(title, {"title": title}).setdefault("envelopes", {})
                    envelope.add(curve.setdefault(str(series), envelope.new()), step, x, float(value))
                    points.append(
                        {
                            "job_id": job.id,
                            "figure": title,
                            "series": str(series),
                            "step": step,
                            "x": x,
                            "value": float(value),
                            "time": moment,
                        }
                    )
            elif kind == "progress":
                try:
                    fraction = min(1.0, max(0.0, float(event["value"])))
                except (KeyError, TypeError, ValueError):
                    invalid += 1
                    continue
                job.progress, job.progress_time = fraction, moment
                started = _timestamp(job.started) or moment
                job.eta_seconds = (moment - started) * (1 - fraction) / fraction if fraction > 0 else None
            elif kind == "figure":
                title = str(event.get("title", ""))
                fields = {k: v for k, v in event.items() if k not in ("type", "time")}
                figures[title] = {**fields, "envelopes": figures.get(title, {}).get("envelopes", {})}
            elif kind == "result":
                results.append(event)
            elif kind == "save":
                saves.append(
                    {k: event.get(k) for k in ("kind", "path", "name", "description", "as_serialized")}
                )
            elif kind == "stop":
                asked_stop = True
            elif kind in ("ready", "done"):
                handle[f"{kind}_event_time"] = moment
        if points:
            session.execute(insert(Metric.__table__), points)  # Core executemany: no ORM per row
        job.figures, job.results, job.saves, job.handle = figures, results, saves, handle
        job.events_invalid += invalid
        return asked_stop

    # stopping and finishing

    def stop(self, project: str, job_id: str, reason: str = "stopped on request") -> Job:
        """Stop a job: a queued one at once, a running one by SIGTERM then SIGKILL after the grace period."""
        job = self.get(project, job_id)
        if job.is_final:
            raise Conflict(f"job {job_id} has already ended ({job.state})")
        with self.ledger.locked() as session:
            row = session.get(Job, job_id)
            was_queued = row.state == "queued"
            if was_queued:
                row.state, row.reason, row.finished = "stopped", "stopped before it started", _now()
            else:
                row.stop_requested, row.reason = True, reason
        job = self.get(project, job_id)
        if was_queued:
            return job
        launch = self._stored_launch(job)
        if launch is not None:
            run_sync(self.executor.stop(launch, job.handle, self.grace_seconds))
            state = run_sync(self.executor.poll(launch, job.handle))
            if not state.running and read_json(launch.run_dir / "status.json") is None:
                self.finish(job_id, self._status_of(state, stopped=True))
        return self.get(project, job_id)

    def _stored_launch(self, job: Job) -> JobLaunch | None:
        data = read_json(self.run_dir(job) / "job.json")
        return JobLaunch.from_json(data) if data is not None else None

    @staticmethod
    def _status_of(state: ExecutionState, stopped: bool = False) -> dict:
        return {"exit_code": state.exit_code, "reason": state.reason or "", "stopped": stopped, "lost": True}

    def finish(self, job_id: str, status: dict) -> None:
        """Record a job's end from its status: ingest the last events, register outputs, release, schedule."""
        job = self._job(job_id)
        if job.is_final:
            return
        with contextlib.suppress(FileNotFoundError):
            self.ingest(job_id)
        job = self._job(job_id)
        handle = read_json(self.run_dir(job) / "handle.json") or {}
        exit_code, reason = status.get("exit_code"), status.get("reason") or ""
        if status.get("stopped") or job.stop_requested:
            state = "stopped"
            reason = job.reason or reason
            if status.get("killed_after_seconds") is not None:
                reason += f" (SIGKILL after {status['killed_after_seconds']:g} s)"
        elif status.get("lost") and exit_code is None:
            state = "lost"
        elif exit_code == 0 or (exit_code is None and not reason and job.handle.get("done_event_time")):
            state = "succeeded"
        else:
            state = "failed"
            if exit_code is None and not reason:
                reason = "its exit code was lost with its first supervisor and it never reported done"
        if state == "succeeded":
            try:
                self._register_outputs(job)
            except KPLError as error:
                state, reason = "failed", f"could not register its outputs: {error.message}"
        self._end(
            job_id,
            state,
            reason=reason,
            exit_code=exit_code,
            last_log_lines=status.get("last_log_lines", ""),
            handle=handle,
        )
        self.schedule()

    def _end(self, job_id: str, state: str, reason: str = "", **fields) -> None:
        with self.ledger.locked() as session:
            job = session.get(Job, job_id)
            if job.is_final:
                return
            job.state, job.reason, job.finished = state, reason, _now()
            if fields.get("handle"):
                job.handle = {**job.handle, **fields["handle"]}
                job.enforcement = fields["handle"].get("enforcement", job.enforcement)
            if "exit_code" in fields:
                job.exit_code = fields["exit_code"]
            if fields.get("last_log_lines"):
                job.last_log_lines = fields["last_log_lines"]
            self.ledger.release("job", job_id, session)

    def _register_outputs(self, job: Job) -> None:
        """Register each written output folder (dataset or model) and each saved path, with lineage."""
        from kpl_dataset.manifest import MANIFEST_SUFFIX

        catalog, project, run_dir = self.platform.catalog, job.project.name, self.run_dir(job)
        lineage = {
            "job_id": job.id,
            "algorithm": job.algorithm_ref,
            "function": job.function,
            "inputs": {key: spec["version"] for key, spec in job.inputs.items()},
            "parameters": job.parameters,
        }
        outputs = {key: dict(spec) for key, spec in job.outputs.items()}
        for key, spec in outputs.items():
            folder = run_dir / "outputs" / key
            if spec.get("registered") or not folder.is_dir() or not any(folder.iterdir()):
                continue
            name = _catalog_name(spec.get("name"), key)
            description = f"output {key} of job {job.id}"
            if any(p.name.endswith(MANIFEST_SUFFIX) for p in folder.iterdir()):
                row = catalog.add_dataset(
                    project, name, folder, description, lineage={**lineage, "output": key}
                )
                spec["registered"] = f"dataset:{row.ref}"
            else:
                row = catalog.add_model(
                    project, name, folder, description, lineage={**lineage, "output": key}
                )
                spec["registered"] = f"model:{row.ref}"
        saves = [dict(s) for s in job.saves]
        for save in saves:
            if save.get("registered") or save.get("kind") not in ("dataset", "model"):
                continue  # saved algorithms are added by a person, not by a job
            path = Path(str(save.get("path"))).resolve()
            if not path.is_relative_to(run_dir.resolve()):
                raise BadRequest(
                    f"save {save.get('kind')} {save.get('name')!r}: {path} is outside the job's run folder"
                )
            name = _catalog_name(save.get("name"), "saved")
            description = save.get("description") or f"saved by job {job.id}"
            if save["kind"] == "dataset":
                row = catalog.add_dataset(project, name, path, description, lineage=lineage)
            else:
                row = catalog.add_model(project, name, path, description, lineage=lineage)
            save["registered"] = f"{save['kind']}:{row.ref}"
        with self.platform.session(immediate=True) as session:
            row = session.get(Job, job.id)
            row.outputs, row.saves = outputs, saves

    # restarts and polling

    def reconcile(self) -> dict[str, str]:
        """After a restart: re-attach to running jobs, finish those that ended, mark the vanished lost.

        Cheap when nothing is queued or running (one query), so every CLI start calls it.
        """
        with self.platform.session() as session:
            active = session.execute(
                select(Job.id, Job.state).where(Job.state.in_(("queued", "running")))
            ).all()
        if not active:
            return {}
        running = [job_id for job_id, state in active if state == "running"]
        outcome = {}
        for job_id in running:
            job = self._job(job_id)
            launch = self._stored_launch(job)
            if launch is None:
                self._end(job_id, "lost", reason="lost: its run folder has no job.json (it never started)")
                outcome[job_id] = "lost"
                continue
            state = run_sync(self.executor.attach(launch, job.handle))
            if state.running:
                if state.handle != job.handle:
                    self._store_handle(job_id, state.handle)
                outcome[job_id] = "running"
                continue
            if not self.supervised:
                self._settle(job_id, launch, state)
                outcome[job_id] = self._job(job_id).state
                continue
            status = read_json(launch.run_dir / "status.json")
            self.finish(job_id, status if status is not None else self._status_of(state))
            if status is None:  # its supervisor died: clean up after it
                run_sync(self.executor.on_failure(launch, state))
            outcome[job_id] = self._job(job_id).state
        self.schedule()
        return outcome

    def tick(self) -> list[str]:
        """Poll the jobs no local supervisor watches: ingest, stop, finish; then start queued ones.

        The server calls this every few seconds. With the local executor each job's
        supervisor does this work, and `tick()` only schedules. Returns the jobs that ended.
        """
        ended = []
        if not self.supervised:
            with self.platform.session() as session:
                running = session.scalars(select(Job.id).where(Job.state == "running")).all()
            for job_id in running:
                try:
                    if self._poll(job_id):
                        ended.append(job_id)
                except KPLError as error:  # the cluster cannot be reached now: try again next tick
                    self.log.warning("job %s: %s", job_id, error.message)
        self.schedule()
        return ended

    def _poll(self, job_id: str) -> bool:
        job = self._job(job_id)
        launch = self._stored_launch(job)
        if launch is None:
            return False  # still being started
        with contextlib.suppress(FileNotFoundError):
            if self.ingest(job_id):
                self._ask_stop(job_id, "the job asked to be stopped (stop.kill)")
        job = self._job(job_id)
        if job.stop_requested:
            run_sync(self.executor.stop(launch, job.handle, self.grace_seconds))
        state = run_sync(self.executor.poll(launch, job.handle))
        if state.handle != job.handle:
            self._store_handle(job_id, state.handle)
        if state.running:
            return False
        self._settle(job_id, launch, state)
        return True

    def _settle(self, job_id: str, launch: JobLaunch, state: ExecutionState) -> None:
        """Finish a job an executor reports ended: keep its log, clean up, record the end."""
        try:
            if state.exit_code == 0:
                run_sync(self.executor.on_complete(launch, state))
            else:  # also deletes what cannot end on its own (a Job whose image cannot be pulled)
                run_sync(self.executor.on_failure(launch, state))
        except KPLError as error:
            self.log.warning("job %s: cleaning up failed: %s", job_id, error.message)
        lines = tail_lines(launch.run_dir / "output.log")
        reason = state.reason or ""
        if not reason and state.exit_code not in (0, None):
            reason = f"exited with code {state.exit_code}: {last_line(lines)}".rstrip(": ")
        status = {
            "exit_code": state.exit_code,
            "reason": reason,
            "lost": reason.startswith("lost:"),
            "last_log_lines": lines,
        }
        self.finish(job_id, status)

    def _store_handle(self, job_id: str, handle: dict) -> None:
        with self.platform.session(immediate=True) as session:
            row = session.get(Job, job_id)
            row.handle = {**row.handle, **handle}

    def _ask_stop(self, job_id: str, reason: str) -> None:
        with self.platform.session(immediate=True) as session:
            row = session.get(Job, job_id)
            if not row.stop_requested and row.state == "running":
                row.stop_requested, row.reason = True, reason

    # events pushed over HTTP

    def ingest_events(self, job_id: str, token: str, events: list[dict]) -> int:
        """Take events a job POSTed (Kubernetes: `KPL_EVENTS_URL`) and ingest them; return how many.

        The token must be the job's own (its SHA-256 is in the handle). The events are
        appended to the run folder's events.jsonl first, then ingested by offset like a
        local job's, so a repeated ingestion never duplicates a point.
        """
        job = self._job(job_id)
        expected = (job.handle or {}).get("token_sha256")
        given = hashlib.sha256((token or "").encode()).hexdigest()
        if not expected or not hmac.compare_digest(given, expected):
            raise Forbidden(f"job {job_id}: the events token is not this job's")
        if job.is_final:
            raise Conflict(f"job {job_id} has already ended ({job.state}): its events are closed")
        if not isinstance(events, list):
            raise BadRequest("events: expected a JSON array of event objects", field="events")
        lines = []
        for index, event in enumerate(events):
            if not isinstance(event, dict) or not isinstance(event.get("type"), str):
                raise BadRequest(
                    f"events[{index}]: expected an object with a string 'type'", field=f"events[{index}]"
                )
            lines.append(json.dumps(event, separators=(",", ":"), default=str) + "\n")
        path = self.run_dir(job) / "events.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab") as out:
            fcntl.flock(out, fcntl.LOCK_EX)  # two pushes at once never interleave their lines
            try:
                out.write("".join(lines).encode())
                out.flush()
                os.fsync(out.fileno())
            finally:
                fcntl.flock(out, fcntl.LOCK_UN)
        if self.ingest(job_id):
            self._ask_stop(job_id, "the job asked to be stopped (stop.kill)")
        return len(lines)

    # resource use

    def record_usage(self, job_id: str, samples: list[dict]) -> None:
        """Add resource samples to a job (latest, peak, the last samples)."""
        if not samples:
            return
        with self.platform.session(immediate=True) as session:
            row = session.get(Job, job_id)
            row.usage = usage.merge(row.usage or {}, samples)

    def usage(self, project: str, job_id: str) -> dict:
        """Return a job's resource use: {"latest", "peak_memory_mb", "history"} ({} before a sample)."""
        return self.get(project, job_id).usage or {}


def _resources(data: dict) -> Resources:
    return Resources(**data)


def _resources_json(resources: Resources) -> dict:
    return {
        "cpu": resources.cpu,
        "memory": resources.memory,
        "shm": resources.shm,
        "devices": resources.devices,
    }


def _catalog_name(name: str | None, fallback: str) -> str:
    try:
        return check_name(name or fallback)
    except BadRequest:
        return check_name(fallback)


class SupervisorCallbacks:
    """What a local job's supervisor calls: ingest events on a timer, record the end."""

    def __init__(self, config: dict) -> None:
        from ..platform import Platform

        self.platform = Platform(config=Config(config))
        self.jobs = self.platform.jobs
        self.started_recorded = False

    def tick(self, launch: JobLaunch) -> None:
        """Ingest new events; stop the job if it asked; record its pids and limits once."""
        if not self.started_recorded:
            handle = read_json(launch.run_dir / "handle.json")
            if handle is not None:
                with self.platform.session(immediate=True) as session:
                    job = session.get(Job, launch.job_id)
                    job.handle = {**job.handle, **handle}
                    job.enforcement = handle.get("enforcement", "")
                self.started_recorded = True
        if self.jobs.ingest(launch.job_id):
            job = self.jobs._job(launch.job_id)
            if not job.stop_requested and job.state == "running":
                self.jobs.stop(
                    launch.project, launch.job_id, reason="the job asked to be stopped (stop.kill)"
                )

    def record_usage(self, launch: JobLaunch, samples: list[dict]) -> None:
        """Store resource samples on the job."""
        self.jobs.record_usage(launch.job_id, samples)

    def finish(self, launch: JobLaunch, status: dict) -> None:
        """Record the end, register outputs, release the reservation and start queued jobs."""
        try:
            self.jobs.finish(launch.job_id, status)
        finally:
            self.platform.close()


def supervisor_callbacks(config: dict) -> SupervisorCallbacks:
    """Return the callbacks of a supervisor (the factory named in supervisor.json)."""
    return SupervisorCallbacks(config)


__all__ = ["FINAL_STATES", "JobRequest", "JobService", "ResourceRequest"]
