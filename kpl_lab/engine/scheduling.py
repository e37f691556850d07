"""Scheduling: start queued jobs that fit the ledger, by priority then age, through the executor.

A job is `queued` until the ledger can hold its resources, then `running`: its
reservation and device indexes are written in the same locked transaction. A submitted
job that nothing queued is ahead of and that fits now is inserted `running` and, on a
supervised executor, started before that transaction commits (`start_now`): its record,
reservation and handle are written while its interpreter starts.
"""

from __future__ import annotations

from logging import Logger
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.orm import joinedload

from ..catalog.jobs import Job
from .executor import Executor, run_sync
from .finishing import end_job
from .launch import JobLaunch, Resources
from .ledger import Ledger
from .records import JobRecords, now
from .runfolder import left_to_host, this_process

if TYPE_CHECKING:
    from ..platform import Platform

ALGORITHM_CACHE = 32


class Scheduler:
    """Reserve resources for queued jobs and launch them."""

    def __init__(
        self,
        platform: Platform,
        ledger: Ledger,
        executor: Executor,
        records: JobRecords,
        supervised: bool,
        log: Logger,
    ) -> None:
        self.platform = platform
        self.ledger = ledger
        self.executor = executor
        self.records = records
        self.supervised = supervised
        self.log = log
        self._algorithms: dict[tuple, Any] = {}  # parsed algorithm versions (immutable)

    def schedules_here(self) -> bool:
        """Say whether this process starts jobs: the platform's host, or anyone on a home that has none.

        Anyone else (a supervisor, `kpl-lab` beside a running server) queues and wakes the host
        (`kpl_lab.rounds`), which decides with the rules in the database.
        """
        from ..rounds import hosted

        return self.platform.hosting or not hosted(self.platform.home)

    def wake(self) -> None:
        """Ask the platform's host for a round now (its scheduling)."""
        from ..rounds import wake

        wake(self.platform.home)

    def after_an_end(self) -> None:
        """Start what fits now that a job ended: the host does it, anyone else wakes the host."""
        if self.platform.hosting:
            self.schedule()
        else:
            self.wake()

    def caught_up(self, launch: JobLaunch) -> None:
        """Wake this host for a job stored just now whose end its supervisor already left to it.

        A round that ran meanwhile could not see the job (its record not committed, or its
        handle still the launcher's) and took the supervisor's wake: the next one finds it.
        """
        if self.supervised and self.platform.hosting and left_to_host(launch.run_dir) is not None:
            self.wake()

    def schedule(self) -> list[str]:
        """Start the queued jobs that fit, by priority then age; return their ids."""
        with self.ledger.locked() as session:
            started = self.reserve_queued(session)
        self.launch(started)
        return [job.id for job in started]

    def reserve_queued(self, session) -> list[Job]:
        """Reserve resources for the queued jobs that fit and mark them running (ledger locked)."""
        started = []
        queued = session.scalars(
            select(Job)
            .options(joinedload(Job.project), joinedload(Job.algorithm_version))
            .where(Job.state == "queued")
            .order_by(Job.priority.desc(), Job.created, Job.id)
        ).all()
        waiting_projects: set[str] = set()
        for job in queued:
            project = job.project.name
            if project in waiting_projects:
                continue  # first come, first served within a project
            reservation = self.ledger.try_reserve(session, project, "job", job.id, Resources(**job.limits))
            if reservation is None:
                waiting_projects.add(project)
                continue
            job.state, job.started, job.assigned_devices = "running", now(), reservation.devices
            # until its handle is stored, the job is this process's to start: reconcile leaves it be
            job.handle = {**(job.handle or {}), "launcher": this_process()}
            started.append(job)
        return started

    def start_now(self, session, job: Job, project: str, version) -> JobLaunch | None:
        """Start a new job at once when it fits (ledger locked; the caller saw no job queued ahead); else None.

        The job (transient, `queued`) is started before its record is written: the caller
        commits `session` while the job's interpreter starts, and calls `abandon` when that
        commit fails. Until it commits, the ledger lock keeps every supervisor from reading
        the job's record, so one that finds none knows it never will (`callbacks`).
        A job that could not start is recorded `failed` in the same transaction.
        """
        if not self.supervised:  # a cluster's job has no supervisor to stop it if the commit fails
            return None
        reservation = self.ledger.try_reserve(session, project, "job", job.id, Resources(**job.limits))
        if reservation is None:
            return None
        job.state, job.started, job.assigned_devices = "running", now(), reservation.devices
        try:
            launch = self._launch_of(job, project, version, session)
            job.handle = run_sync(self.executor.start(launch))
        except Exception as error:
            self.log.exception("job %s could not start", job.id)
            job.state, job.reason, job.finished = "failed", f"could not start: {error}", now()
            self.ledger.release("job", job.id, session)
            session.add(job)
            return None
        session.add(job)
        return launch

    def abandon(self, launch: JobLaunch, handle: dict) -> None:
        """Stop a job started by `start_now` whose record could not be committed."""
        self.log.error("job %s started but its record could not be stored: stopping it", launch.job_id)
        try:
            run_sync(self.executor.stop(launch, handle, grace_seconds=0))
        except Exception:  # its supervisor stops it anyway when it finds no record
            self.log.exception("could not stop job %s", launch.job_id)

    def launch(self, jobs: list[Job]) -> None:
        """Start jobs just marked running (the rows as the scheduling transaction committed them)."""
        for job in jobs:
            self._launch(job)

    def read_algorithm(self, version):
        """Return a parsed algorithm version, parsed once: submit and launch both need it."""
        key = (version.id, version.path)  # ids can be reused after a delete; paths name the content
        if key not in self._algorithms:
            if len(self._algorithms) >= ALGORITHM_CACHE:
                self._algorithms.pop(next(iter(self._algorithms)), None)
            self._algorithms[key] = self.platform.catalog.read_algorithm(version)
        return self._algorithms[key]

    def _launch_of(self, job: Job, project: str | None = None, version=None, session=None) -> JobLaunch:
        """Return a job's launch; `project` and `version` for a job not yet in a session (`session`: the caller's)."""
        catalog = self.platform.catalog
        project = project or job.project.name
        version = version or job.algorithm_version
        algorithm = self.read_algorithm(version)
        function = algorithm.spec.function(job.function)
        inputs = {}
        for key, spec in job.inputs.items():
            _, _, path = catalog.resolve_input(project, f"{spec['kind']}:{spec['version']}", session)
            inputs[key] = path
        limits = Resources(**job.limits)
        return JobLaunch(
            job_id=job.id,
            project=project,
            function=job.function,
            user=job.user,
            cmd=function.cmd,
            algorithm_dir=catalog.path(version),
            run_dir=self.platform.storage.job_dir(project, job.id),
            image=algorithm.spec.image.from_image,
            runs=list(algorithm.spec.image.runs),
            inputs=inputs,
            outputs=list(job.outputs),
            parameters=job.parameters,
            limits=limits,
            requests=Resources(**job.requests) if job.requests else None,
            # a cluster's device plugin picks the devices: the local indexes mean nothing there
            assigned_devices=job.assigned_devices if self.supervised else {},
        )

    def _launch(self, job: Job) -> None:
        try:
            launch = self._launch_of(job)
            handle = run_sync(self.executor.start(launch))
        except Exception as error:
            self.log.exception("job %s could not start", job.id)
            end_job(self.ledger, job.id, "failed", reason=f"could not start: {error}")
            return
        with self.platform.session(immediate=True) as session:
            row = session.get(Job, job.id)
            row.handle = {
                key: value for key, value in {**(row.handle or {}), **handle}.items() if key != "launcher"
            }
        self.caught_up(launch)
