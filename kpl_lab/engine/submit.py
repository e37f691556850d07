"""Submitting: check a job request against its algorithm and the quota, queue it; rerun, copy, resume."""

from __future__ import annotations

import functools
import secrets
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, exists, inspect, select

from ..api.jobs import JobRequest, ResourceRequest
from ..catalog.jobs import Job
from ..catalog.models import Algorithm, AlgorithmVersion, Project
from ..catalog.rules import JOB_DEFAULTS, Rules
from ..catalog.storage import check_name
from ..errors import BadRequest, KPLError, NotFound, invalid, parameter_error
from .launch import Resources
from .ledger import Ledger
from .records import JobRecords
from .scheduling import Scheduler

if TYPE_CHECKING:
    from ..platform import Platform


VERSIONS_KEPT = 64  # algorithm versions found by earlier submits, each checked again by the next


@functools.cache
def _checks_query(pinned: bool):
    """Return the one query of a start's checks: is the drawn id taken, is any job queued, and the
    id and path of the version the algorithm ref names now (NAME:VERSION, or NAME's latest)."""
    named = (
        select(AlgorithmVersion.id, AlgorithmVersion.path)
        .join(Algorithm, AlgorithmVersion.algorithm_id == Algorithm.id)
        .join(Project, Algorithm.project_id == Project.id)
        .where(Project.name == bindparam("project"), Algorithm.name == bindparam("name"))
    )
    if pinned:
        named = named.where(AlgorithmVersion.version == bindparam("version"))
    else:
        named = named.order_by(AlgorithmVersion.id.desc()).limit(1)
    return select(
        exists().where(Job.id == bindparam("id")),
        exists().where(Job.state == "queued"),
        named.with_only_columns(AlgorithmVersion.id).scalar_subquery(),
        named.with_only_columns(AlgorithmVersion.path).scalar_subquery(),
    )


class Submitter:
    """Turn job requests into queued jobs and schedule them."""

    def __init__(
        self,
        platform: Platform,
        ledger: Ledger,
        records: JobRecords,
        scheduler: Scheduler,
        executor_name: str,
        default_resources: Resources,
    ) -> None:
        self.platform = platform
        self.ledger = ledger
        self.records = records
        self.scheduler = scheduler
        self.executor_name = executor_name
        self.default_resources = default_resources
        # (project, algorithm ref) -> version, see `submit`; read and written under the ledger lock
        self._versions: dict[tuple[str, str], Any] = {}

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
        project = check_name(request.project, "project")
        started, launched, job = [], None, None
        here = self.scheduler.schedules_here()  # else it is queued and the host woken
        try:
            # one transaction from the version's lookup to the start (a session of its own
            # costs more than the lookup); queued and scheduled together, and one that starts
            # at once starts before the commit (Scheduler.start_now)
            with self.ledger.locked() as session:
                key = (project, request.algorithm)
                version = cached = self._versions.get(key)
                if version is None:
                    version = self.platform.catalog.algorithm_version(project, request.algorithm, session)
                job = self._checked_job(request, project, version, copied_from, resumed_from, user, session)
                taken, queued, found = self._checks(session, job.id, project, request.algorithm)
                if cached is not None and found != (cached.id, cached.path):  # its versions changed since
                    version = self.platform.catalog.algorithm_version(project, request.algorithm, session)
                    job = self._checked_job(
                        request, project, version, copied_from, resumed_from, user, session
                    )
                    taken, queued, found = self._checks(session, job.id, project, request.algorithm)
                self._remember(key, version, found)
                if taken:
                    job.id = self._new_id(session)
                launched = (
                    None if queued or not here else self.scheduler.start_now(session, job, project, version)
                )
                if launched is None and job.state == "queued":
                    session.add(job)
                    if here:
                        started = self.scheduler.reserve_queued(session)
        except Exception:
            if launched is not None:
                self.scheduler.abandon(launched, job.handle)
            raise
        if launched is not None:
            self.scheduler.caught_up(launched)
        if here:
            self.scheduler.launch(started)
        else:
            self.scheduler.wake()
        return self.records.get(project, job.id)

    def _checks(self, session, job_id: str, project: str, ref: str) -> tuple[bool, bool, tuple | None]:
        """Say whether `job_id` is taken and any job is queued; return the (id, path) of the version `ref` names."""
        name, _, version = ref.partition(":")
        values = {"id": job_id, "project": project, "name": name, "version": version}
        taken, queued, version_id, path = session.execute(_checks_query(bool(version)), values).one()
        return taken, queued, None if version_id is None else (version_id, path)

    def _remember(self, key: tuple[str, str], version, found: tuple | None) -> None:
        """Keep a version for the next submit of the same ref: one of no session, that the checks found."""
        if found == (version.id, version.path) and inspect(version).transient:
            if key not in self._versions and len(self._versions) >= VERSIONS_KEPT:
                self._versions.pop(next(iter(self._versions)))
            self._versions[key] = version
        else:  # e.g. a version given by a hash prefix: looked up each time
            self._versions.pop(key, None)

    def _checked_job(
        self,
        request: JobRequest,
        project: str,
        version,
        copied_from: str | None,
        resumed_from: str | None,
        user: str,
        session,
    ) -> Job:
        """Return the queued job a request asks for, or say every field at fault."""
        from ..algorithms.errors import AlgorithmError, ParameterError
        from ..algorithms.parameters import apply_overrides

        catalog = self.platform.catalog
        algorithm = self.scheduler.read_algorithm(version)
        try:
            function = algorithm.spec.function(request.function)
        except AlgorithmError as error:
            raise BadRequest(str(error), field="function") from error
        declared = {port.key for port in function.inputs}
        problems = []  # every field at fault, answered together
        for key in request.inputs:
            if key not in declared:
                known = ", ".join(sorted(declared)) or "none"
                problems.append(
                    (
                        f"inputs.{key}",
                        f"the {request.function} function of {version.ref} has no such input (inputs: {known})",
                    )
                )
        try:
            parameters = apply_overrides(version.parameters or {}, request.parameters)
        except ParameterError as error:
            problems += parameter_error(error).errors
        if problems:
            raise invalid(problems, "the job")
        inputs = {}
        for key, ref in request.inputs.items():
            try:
                kind, row, _ = catalog.resolve_input(project, ref, session)
            except KPLError as error:
                raise type(error)(f"input {key!r}: {error.message}", field=f"inputs.{key}") from error
            inputs[key] = {"ref": ref, "kind": kind, "version_id": row.id, "version": row.ref}
        # the rules' defaults (a host's settings), else this process's own
        mine = {"cpu": self.default_resources.cpu, "memory": self.default_resources.memory}
        defaults = mine | (Rules.get(session, JOB_DEFAULTS) or {})
        limits = Resources.of(function, Resources(cpu=defaults["cpu"], memory=defaults["memory"]))
        overrides = request.resources.model_dump(exclude_none=True) if request.resources else {}
        for kind in ("gpu", "npu"):
            if kind in overrides:
                limits.devices[kind] = overrides.pop(kind)
        for name, value in overrides.items():
            setattr(limits, name, value)
        limits.devices = {kind: count for kind, count in limits.devices.items() if count}
        try:
            self.ledger.check(project, limits, session)
        except BadRequest as error:  # the ledger names the resource; the request has it under resources
            raise BadRequest(error.message, field=f"resources.{error.field}") from error
        requests = None
        if function.resource.requests is not None:
            asked = function.resource.requests
            requests = Resources(
                cpu=asked.cpu or limits.cpu,
                memory=asked.memory or limits.memory,
                shm=asked.shm or limits.shm,
                devices=dict(limits.devices),
            ).to_json()
        outputs = {port.key: {"name": port.name, "registered": None} for port in function.outputs}
        return Job(
            id=secrets.token_hex(5),  # 40 random bits; one already taken is drawn again by `submit`
            project_id=version.algorithm.project_id,  # the algorithm's project exists
            algorithm_version_id=version.id,
            algorithm_ref=version.ref,
            function=request.function,
            user=user,
            state="queued",
            priority=request.priority,
            inputs=inputs,
            parameters=parameters,
            outputs=outputs,
            limits=limits.to_json(),
            requests=requests,
            executor=self.executor_name,
            copied_from=copied_from,
            resumed_from=resumed_from,
        )

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
                workers=job.limits.get("workers", 1),
            ),
            priority=job.priority,
        )

    def rerun(self, project: str, job_id: str, user: str = "") -> Job:
        """Run the same algorithm version, inputs, parameters and resources again (as `user`)."""
        job = self.records.get(project, job_id)
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
        job = self.records.get(project, job_id)
        request = self._request_of(job)
        if parameters:
            request.parameters = {**request.parameters, **parameters}
        if resources:
            merged = request.resources.model_dump() | resources
            request.resources = ResourceRequest(**merged)
        return self.submit(request, copied_from=job.id, user=user)

    def resume(self, project: str, job_id: str, parameters: dict | None = None, user: str = "") -> Job:
        """Run a copy whose `checkpoint` (or first model) input is the model this job produced."""
        job = self.records.get(project, job_id)
        produced = [
            o["registered"] for o in job.outputs.values() if (o.get("registered") or "").startswith("model:")
        ]
        produced += [s["registered"] for s in job.saves if (s.get("registered") or "").startswith("model:")]
        if not produced:
            raise BadRequest(f"job {job_id} registered no model to resume from (state: {job.state})")
        if job.algorithm_version is None:
            raise NotFound(f"the algorithm {job.algorithm_ref} of job {job_id} was deleted")
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
