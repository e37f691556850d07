"""Finishing: stop jobs, record their end (`succeeded`, `failed`, `stopped`, `lost`), register outputs."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from ..catalog.jobs import Job
from ..catalog.storage import check_name
from ..errors import BadRequest, Conflict, KPLError
from .events import EventIngest
from .executor import ExecutionState, Executor, run_sync
from .ledger import Ledger
from .records import JobRecords, now
from .runfolder import read_own_json
from .usage import merge

if TYPE_CHECKING:
    from ..platform import Platform
    from .scheduling import Scheduler


def end_job(ledger: Ledger, job_id: str, state: str, reason: str = "", **fields) -> None:
    """Record a job's final state and release its reservation, unless it has already ended."""
    with ledger.locked() as session:
        job = session.get(Job, job_id)
        if job.is_final:
            return
        job.state, job.reason, job.finished = state, reason, now()
        if state == "succeeded":  # stored, so every list and view shows 100 %, not the last report
            job.progress, job.eta_seconds = 1.0, 0.0
        if fields.get("handle"):
            job.handle = {**job.handle, **fields["handle"]}
            job.enforcement = fields["handle"].get("enforcement", job.enforcement)
        if "exit_code" in fields:
            job.exit_code = fields["exit_code"]
        if fields.get("usage"):
            job.usage = merge(job.usage or {}, fields["usage"])
        if fields.get("last_log_lines"):
            job.last_log_lines = fields["last_log_lines"]
        ledger.release("job", job_id, session)


def status_of(state: ExecutionState, stopped: bool = False) -> dict:
    """Return the status of a job whose supervisor wrote none, from what its executor reports."""
    return {"exit_code": state.exit_code, "reason": state.reason or "", "stopped": stopped, "lost": True}


def _catalog_name(name: str | None, fallback: str) -> str:
    """Return name when it is a valid catalog name, else fallback."""
    try:
        return check_name(name or fallback)
    except BadRequest:
        return check_name(fallback)


class Finisher:
    """Stop jobs and record their end; then start the queued jobs that now fit."""

    def __init__(
        self,
        platform: Platform,
        ledger: Ledger,
        executor: Executor,
        records: JobRecords,
        events: EventIngest,
        scheduler: Scheduler,
        grace_seconds: float,
    ) -> None:
        self.platform = platform
        self.ledger = ledger
        self.executor = executor
        self.records = records
        self.events = events
        self.scheduler = scheduler
        self.grace_seconds = grace_seconds

    def stop(self, project: str, job_id: str, reason: str = "stopped on request") -> Job:
        """Stop a job: a queued one at once, a running one by SIGTERM then SIGKILL after the grace period."""
        job = self.records.get(project, job_id)
        if job.is_final:
            raise Conflict(f"job {job_id} has already ended ({job.state})")
        with self.ledger.locked() as session:
            row = session.get(Job, job_id)
            was_queued = row.state == "queued"
            if was_queued:
                row.state, row.reason, row.finished = "stopped", "stopped before it started", now()
            else:
                row.stop_requested, row.reason = True, reason
        job = self.records.get(project, job_id)
        if was_queued:
            return job
        launch = self.records.stored_launch(job)
        if launch is not None:
            run_sync(self.executor.stop(launch, job.handle, self.grace_seconds))
            state = run_sync(self.executor.poll(launch, job.handle))
            if not state.running and read_own_json(launch.run_dir / "status.json") is None:
                self.finish(job_id, status_of(state, stopped=True))
        return self.records.get(project, job_id)

    def finish(self, job_id: str, status: dict) -> None:
        """Record a job's end from its status: ingest the last events, register outputs, release, wake the host."""
        job = self.records.job(job_id)
        if job.is_final:
            return
        with contextlib.suppress(FileNotFoundError):
            self.events.ingest(job_id)
        job = self.records.job(job_id)
        handle = read_own_json(self.records.run_dir(job) / "handle.json") or {}
        exit_code, reason = status.get("exit_code"), status.get("reason") or ""
        if status.get("stopped") or job.stop_requested:
            state = "stopped"
            reason = job.reason or reason
            if status.get("killed_after_seconds") is not None:
                reason += f" (SIGKILL after {status['killed_after_seconds']:g} s)"
        elif exit_code is None and job.handle.get("done_event_time") and (status.get("lost") or not reason):
            # its supervisor died, so its exit code is unknown, but it reported done
            state = "succeeded"
            reason = "its supervisor died; the job reported done" if status.get("lost") else ""
        elif status.get("lost") and exit_code is None:
            state = "lost"
        elif exit_code == 0:
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
        end_job(
            self.ledger,
            job_id,
            state,
            reason=reason,
            exit_code=exit_code,
            last_log_lines=status.get("last_log_lines", ""),
            handle=handle,
            usage=status.get("usage"),  # the last samples of a supervisor that left the end to the host
        )
        self.scheduler.after_an_end()

    def _final_metrics(self, job: Job) -> dict[str, float]:
        """Return `figure/series` -> the last value the job reported, for the lineage of its outputs."""
        latest = self.records.latest_metrics(job.project.name, job.id)
        return {
            f"{figure}/{series}": value
            for figure, by_series in latest.items()
            for series, (_, value) in by_series.items()
        }

    def _register_outputs(self, job: Job) -> None:
        """Register each written output folder (dataset or model) and each saved path, with lineage."""
        from kpl_dataset.names import part_of  # a folder's names only: no Arrow loaded to finish a job

        catalog, project, run_dir = self.platform.catalog, job.project.name, self.records.run_dir(job)
        lineage = {
            "job_id": job.id,
            "algorithm": job.algorithm_ref,
            "function": job.function,
            "inputs": {key: spec["version"] for key, spec in job.inputs.items()},
            "parameters": job.parameters,
            "metrics": self._final_metrics(job),
        }
        algorithm = job.algorithm_ref.split(":", 1)[0]
        outputs = {key: dict(spec) for key, spec in job.outputs.items()}
        for key, spec in outputs.items():
            folder = run_dir / "outputs" / key
            if spec.get("registered") or not folder.is_dir() or not any(folder.iterdir()):
                continue
            # the port's name describes it ("trained model"); the catalog name says whose it is
            name = _catalog_name(f"{algorithm}-{key}", key)
            description = f"{spec.get('name') or key}: output {key} of job {job.id}"
            if any(part_of(p.name) is not None for p in folder.iterdir()):
                row = catalog.add_dataset(
                    project, name, folder, description, lineage={**lineage, "output": key}, within=run_dir
                )
                spec["registered"] = f"dataset:{row.ref}"
            else:
                row = catalog.add_model(
                    project, name, folder, description, lineage={**lineage, "output": key}, within=run_dir
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
            name = _catalog_name(save.get("name"), f"{algorithm}-saved")
            description = save.get("description") or f"saved by job {job.id}"
            add = catalog.add_dataset if save["kind"] == "dataset" else catalog.add_model
            row = add(project, name, path, description, lineage=lineage, within=run_dir.resolve())
            save["registered"] = f"{save['kind']}:{row.ref}"
        with self.platform.session(immediate=True) as session:
            row = session.get(Job, job.id)
            row.outputs, row.saves = outputs, saves
