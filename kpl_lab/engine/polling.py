"""Polling and restarts: watch the jobs no local supervisor watches; re-attach after a restart."""

from __future__ import annotations

import contextlib
from logging import Logger
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import select

from ..catalog.jobs import Job
from ..errors import KPLError
from .events import EventIngest
from .executor import ExecutionState, Executor, run_sync
from .finishing import Finisher, end_job, status_of
from .launch import JobLaunch
from .ledger import Ledger
from .records import JobRecords
from .runfolder import is_alive, left_to_host, read_own_json
from .scheduling import Scheduler
from .supervisor import last_line, tail_lines

if TYPE_CHECKING:
    from ..platform import Platform


def being_started(handle: dict | None) -> bool:
    """Return whether a live process (a server, a CLI) is starting this running job right now."""
    launcher = (handle or {}).get("launcher")
    return launcher is not None and is_alive(*launcher)


class Poller:
    """Ingest, stop and finish jobs by asking their executor; reconcile after a restart."""

    def __init__(
        self,
        platform: Platform,
        ledger: Ledger,
        executor: Executor,
        records: JobRecords,
        events: EventIngest,
        scheduler: Scheduler,
        finisher: Finisher,
        supervised: bool,
        log: Logger,
    ) -> None:
        self.platform = platform
        self.ledger = ledger
        self.executor = executor
        self.records = records
        self.events = events
        self.scheduler = scheduler
        self.finisher = finisher
        self.supervised = supervised
        self.log = log

    def reconcile(self) -> dict[str, str]:
        """After a restart: re-attach to running jobs, finish those that ended, mark the vanished lost.

        Cheap when nothing is queued or running (one query), so every CLI start calls it.
        """
        with self.platform.session() as session:
            active = session.execute(
                select(Job.id, Job.state, Job.handle).where(Job.state.in_(("queued", "running")))
            ).all()
        if not active:
            return {}
        outcome = {
            job_id: self._reattach(job_id)
            for job_id, state, handle in active
            if state == "running" and not being_started(handle)
        }
        self.scheduler.schedule()
        return outcome

    def _reattach(self, job_id: str) -> str:
        """Re-attach to a running job, adopt it, or record its end; return its state."""
        job = self.records.job(job_id)
        launch = self.records.stored_launch(job)
        if launch is None:
            end_job(
                self.ledger,
                job_id,
                "lost",
                reason="lost: its run folder has no job.json (it never started)",
            )
            return "lost"
        state = run_sync(self.executor.attach(launch, job.handle))
        if state.running:
            if state.handle != job.handle:
                self.records.store_handle(job_id, state.handle)
            return "running"
        if not self.supervised:
            self._settle(job_id, launch, state)
            return self.records.job(job_id).state
        status = read_own_json(launch.run_dir / "status.json")
        self.finisher.finish(job_id, status if status is not None else status_of(state))
        if status is None:  # its supervisor died: clean up after it
            run_sync(self.executor.on_failure(launch, state))
        return self.records.job(job_id).state

    def tick(self) -> list[str]:
        """Watch the running jobs, record the ends, then start queued ones. Returns the jobs that ended.

        The server calls this every few seconds. Without supervisors it polls each job's
        executor (ingest, stop, finish). With the local executor each job's supervisor does
        that work, and `tick()` only checks that the supervisors live (pid and start time).
        """
        ended = []
        if self.supervised:
            ended = self._check_supervisors()
        else:
            with self.platform.session() as session:
                running = session.scalars(select(Job.id).where(Job.state == "running")).all()
            for job_id in running:
                try:
                    if self._poll(job_id):
                        ended.append(job_id)
                except KPLError as error:  # the cluster cannot be reached now: try again next tick
                    self.log.warning("job %s: %s", job_id, error.message)
        self.scheduler.schedule()
        return ended

    def _check_supervisors(self) -> list[str]:
        """Record the ends left to this host; adopt or finish the running jobs whose supervisor died.

        Return the jobs that ended.
        """
        with self.platform.session() as session:
            running = session.execute(select(Job.id, Job.handle).where(Job.state == "running")).all()
        ended = []
        for job_id, handle in running:
            handle = handle or {}
            if being_started(handle) or "supervisor_pid" not in handle:
                continue
            status = left_to_host(Path(handle["run_dir"])) if handle.get("run_dir") else None
            if status is not None:  # its supervisor woke this host for it, and leaves
                self.finisher.finish(job_id, status)
                ended.append(job_id)
                continue
            if is_alive(handle["supervisor_pid"], handle.get("supervisor_start")):
                continue
            self.log.warning("job %s: its supervisor (pid %s) is gone", job_id, handle["supervisor_pid"])
            if self._reattach(job_id) != "running":
                ended.append(job_id)
        return ended

    def _poll(self, job_id: str) -> bool:
        job = self.records.job(job_id)
        launch = self.records.stored_launch(job)
        if launch is None:
            return False  # still being started
        with contextlib.suppress(FileNotFoundError):
            if self.events.ingest(job_id):
                self.records.ask_stop(job_id, "the job asked to be stopped (stop.kill)")
        job = self.records.job(job_id)
        if job.stop_requested:
            run_sync(self.executor.stop(launch, job.handle, self.finisher.grace_seconds))
        state = run_sync(self.executor.poll(launch, job.handle))
        if state.handle != job.handle:
            self.records.store_handle(job_id, state.handle)
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
        lines = tail_lines(launch.run_dir, "output.log")
        reason = state.reason or ""
        if not reason and state.exit_code not in (0, None):
            reason = f"exited with code {state.exit_code}: {last_line(lines)}".rstrip(": ")
        status = {
            "exit_code": state.exit_code,
            "reason": reason,
            "lost": reason.startswith("lost:"),
            "last_log_lines": lines,
        }
        self.finisher.finish(job_id, status)
