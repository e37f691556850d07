"""Jobs: the `JobService` facade over submit, scheduling, event ingest, finishing and polling.

A job is `queued` until the ledger can hold its resources, then `running`, then
`succeeded`, `failed`, `stopped` or `lost`. Each step lives in its own module
(`submit`, `scheduling`, `events`, `finishing`, `polling`, `records`; `callbacks` for
the local supervisor); this class wires them to one platform, ledger and executor.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from traitlets import Float, Integer, Type
from traitlets.config import LoggingConfigurable
from traitlets.config.loader import DeferredConfigString

from ..api.jobs import JobRequest, ResourceRequest  # noqa: F401 - kept importable from here
from ..catalog.jobs import FINAL_STATES, Job
from ..catalog.rules import JOB_DEFAULTS, MACHINE
from .events import EventIngest
from .executor import Executor
from .finishing import Finisher
from .launch import Resources
from .ledger import Ledger
from .local import LocalExecutor
from .polling import Poller
from .queue import Queue, QueueReason
from .records import JobRecords
from .scheduling import Scheduler
from .submit import Submitter

if TYPE_CHECKING:
    from ..platform import Platform

CONFIG_SECTIONS = ("Platform", "JobService", "Ledger", "LocalExecutor")


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
        if self.supervised:
            self.executor.grace_seconds = self.grace_seconds
            self.executor.environments_dir = str(Path(platform.home) / "environments")
            self.executor.helper_socket = platform.helper_socket
            self.executor.platform_home = str(platform.home)
            self.executor.passed_environment = list(platform.passed_environment)
            self.executor.callbacks = "kpl_lab.engine.callbacks:supervisor_callbacks"
            self.executor.callbacks_config = self._platform_config()
        self.records = JobRecords(platform)
        self.events = EventIngest(platform, self.records)
        self.queue = Queue(self.ledger)
        self.scheduler = Scheduler(
            platform, self.ledger, self.executor, self.records, self.supervised, self.log
        )
        self.finisher = Finisher(
            platform,
            self.ledger,
            self.executor,
            self.records,
            self.events,
            self.scheduler,
            self.grace_seconds,
        )
        self.submitter = Submitter(
            platform,
            self.ledger,
            self.records,
            self.scheduler,
            "local" if self.supervised else type(self.executor).__name__,
            Resources(cpu=self.default_cpu, memory=self.default_memory),
        )
        self.poller = Poller(
            platform,
            self.ledger,
            self.executor,
            self.records,
            self.events,
            self.scheduler,
            self.finisher,
            self.supervised,
            self.log,
        )

    def load_config(self) -> None:
        """Load this process's settings into the platform's rules (a host's start): capacity, quotas, job defaults."""
        self.ledger.load_config()
        self.ledger.rules.load(
            JOB_DEFAULTS, MACHINE, {"cpu": self.default_cpu, "memory": self.default_memory}
        )

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
            # a command-line value (`--LocalExecutor.use_cgroups=False`) is text until a trait reads it
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
        """Check and queue a job (as the hub `user`), then start it at once if it fits."""
        return self.submitter.submit(request, copied_from=copied_from, resumed_from=resumed_from, user=user)

    def rerun(self, project: str, job_id: str, user: str = "") -> Job:
        """Run the same algorithm version, inputs, parameters and resources again (as `user`)."""
        return self.submitter.rerun(project, job_id, user=user)

    def copy(
        self,
        project: str,
        job_id: str,
        parameters: dict | None = None,
        resources: dict | None = None,
        user: str = "",
    ) -> Job:
        """Run a job again with some parameters or resources changed."""
        return self.submitter.copy(project, job_id, parameters=parameters, resources=resources, user=user)

    def resume(self, project: str, job_id: str, parameters: dict | None = None, user: str = "") -> Job:
        """Run a copy whose `checkpoint` (or first model) input is the model this job produced."""
        return self.submitter.resume(project, job_id, parameters=parameters, user=user)

    # scheduling

    def schedule(self) -> list[str]:
        """Start the queued jobs that fit, by priority then age; return their ids."""
        return self.scheduler.schedule()

    # reading

    def run_dir(self, job: Job) -> Path:
        """Return a job's run folder."""
        return self.records.run_dir(job)

    def get(self, project: str, job_id: str) -> Job:
        """Return one job of a project."""
        return self.records.get(project, job_id)

    def list(self, project: str, state: str | None = None) -> list[Job]:
        """Return a project's jobs, newest first, optionally in one state."""
        return self.records.list(project, state)

    def queue_reasons(self, project: str | None = None) -> dict[str, QueueReason]:
        """Return job id -> why it waits, for the queued jobs of a project (or all)."""
        self.ledger.seed()
        with self.platform.session() as session:
            return self.queue.reasons(session, project)

    def queue_reason(self, job: Job) -> QueueReason | None:
        """Return why a job waits (None unless it is queued)."""
        if job.state != "queued":
            return None
        return self.queue_reasons(job.project.name).get(job.id)

    def progress(self, job: Job) -> tuple[float, float | None]:
        """Return the fraction done and the seconds left (None when unknown), of the row given.

        One row for the state and the progress: read apart, a job that ended in between
        showed "succeeded" at the progress it had while running.
        """
        return self.records.progress(job)

    def log_path(self, job: Job, worker: int = 0) -> Path:
        """Return the log of one worker of a job (rank 0's is output.log)."""
        return self.records.log_path(job, worker)

    def follow_logs(self, project: str, job_id: str, follow: bool = False, worker: int = 0) -> Iterator[str]:
        """Yield a worker's output line by line (long lines in pieces); with `follow`, until the job ends."""
        return self.records.follow_logs(project, job_id, follow, worker)

    def metrics(
        self, project: str, job_id: str, max_points: int = 1000
    ) -> dict[str, dict[str, list[tuple[float, float]]]]:
        """Return figure -> series -> points, at most `max_points` (the lowest and highest of each bucket)."""
        return self.records.metrics(project, job_id, max_points)

    def latest_metrics(self, project: str, job_id: str) -> dict[str, dict[str, tuple[float, float]]]:
        """Return figure -> series -> last point (x, value)."""
        return self.records.latest_metrics(project, job_id)

    def usage(self, project: str, job_id: str) -> dict:
        """Return a job's resource use: {"latest", "peak_memory_mb", "history"} ({} before a sample)."""
        return self.records.usage(project, job_id)

    # events

    def ingest(self, job_id: str) -> bool:
        """Read new events of a job into the database; return whether the job asked to be stopped."""
        return self.events.ingest(job_id)

    def is_job_token(self, job_id: str, token: str) -> bool:
        """Say whether TOKEN is the events token of job JOB_ID (False when there is no such job)."""
        return self.events.is_job_token(job_id, token)

    def ingest_events(self, job_id: str, token: str, events: list[dict]) -> int:
        """Take events a job POSTed (Kubernetes: `KPL_EVENTS_URL`) and ingest them; return how many."""
        return self.events.ingest_events(job_id, token, events)

    def record_usage(self, job_id: str, samples: list[dict]) -> None:
        """Add resource samples to a job (latest, peak, the last samples)."""
        self.records.record_usage(job_id, samples)

    # stopping and finishing

    def stop(self, project: str, job_id: str, reason: str = "stopped on request") -> Job:
        """Stop a job: a queued one at once, a running one by SIGTERM then SIGKILL after the grace period."""
        return self.finisher.stop(project, job_id, reason)

    def finish(self, job_id: str, status: dict) -> None:
        """Record a job's end from its status: ingest the last events, register outputs, release, schedule."""
        self.finisher.finish(job_id, status)

    # restarts and polling

    def reconcile(self) -> dict[str, str]:
        """After a restart: re-attach to running jobs, finish those that ended, mark the vanished lost."""
        return self.poller.reconcile()

    def tick(self) -> list[str]:
        """Check local supervisors and poll the other jobs: record ends, then start queued ones."""
        return self.poller.tick()


__all__ = ["FINAL_STATES", "JobRequest", "JobService", "ResourceRequest"]
