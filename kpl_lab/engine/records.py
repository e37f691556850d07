"""Job rows: read jobs, their logs, metrics and usage; write their handle, stop request and usage."""

from __future__ import annotations

import codecs
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import and_, func, select
from sqlalchemy.orm import joinedload

from ..catalog.jobs import Job, Metric
from ..catalog.models import Project
from ..errors import NotFound
from . import envelope, usage
from .launch import JobLaunch
from .runfolder import open_in, read_own_json, worker_log

if TYPE_CHECKING:
    from ..platform import Platform

LOG_CHUNK = 64 * 1024
FOLLOW_POLL_SECONDS = 0.2


def now() -> datetime:
    """Return the current time, timezone-aware."""
    return datetime.now(timezone.utc)


class JobRecords:
    """Read and update job rows and run folders."""

    def __init__(self, platform: Platform) -> None:
        self.platform = platform

    def run_dir(self, job: Job) -> Path:
        """Return a job's run folder."""
        return self.platform.storage.job_dir(job.project.name, job.id)

    def job(self, job_id: str) -> Job:
        """Return a job of any project with its project and algorithm version loaded."""
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
        job = self.job(job_id) if isinstance(job_id, str) and job_id else None
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

    def stored_launch(self, job: Job) -> JobLaunch | None:
        """Return the launch written to the job's run folder, or None before it started."""
        data = read_own_json(self.run_dir(job) / "job.json")
        return JobLaunch.from_json(data) if data is not None else None

    def store_handle(self, job_id: str, handle: dict) -> None:
        """Merge executor fields into a job's handle."""
        with self.platform.session(immediate=True) as session:
            row = session.get(Job, job_id)
            row.handle = {**row.handle, **handle}

    def ask_stop(self, job_id: str, reason: str) -> None:
        """Mark a running job to be stopped (the executor is told by whoever watches it)."""
        with self.platform.session(immediate=True) as session:
            row = session.get(Job, job_id)
            if not row.stop_requested and row.state == "running":
                row.stop_requested, row.reason = True, reason

    @staticmethod
    def progress(job: Job) -> tuple[float, float | None]:
        """Return the fraction done and the seconds left (None when unknown), from the row its state came from."""
        if job.state == "succeeded":
            return 1.0, 0.0
        if job.eta_seconds is None or job.progress_time is None:
            return job.progress, None
        if job.is_final:
            return job.progress, None
        return job.progress, max(0.0, job.eta_seconds - (time.time() - job.progress_time))

    def log_path(self, job: Job, worker: int = 0) -> Path:
        """Return the log of one worker of a job (rank 0's is output.log)."""
        workers = (job.limits or {}).get("workers", 1)
        if not 0 <= worker < workers:
            raise NotFound(
                f"job {job.id} has {workers} worker{'s' if workers > 1 else ''}: worker {worker} does not exist "
                "(workers are numbered from 0)",
                field="worker",
            )
        return worker_log(self.run_dir(job), worker)

    def follow_logs(self, project: str, job_id: str, follow: bool = False, worker: int = 0) -> Iterator[str]:
        """Yield a worker's output line by line (long lines in pieces); with `follow`, until the job ends."""
        job = self.get(project, job_id)
        path, run_dir = self.log_path(job, worker), self.run_dir(job)
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        pending = ""
        while not path.exists():
            if not follow or self.get(project, job_id).is_final:
                return
            time.sleep(FOLLOW_POLL_SECONDS)
        with open(open_in(run_dir, path), "rb") as log:
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
    ) -> dict[str, dict[str, list[tuple[float, float]]]]:
        """Return figure -> series -> points, at most `max_points` (the lowest and highest of each bucket).

        Long series are read from their envelope (kept by ingestion), never point by point.
        """
        job = self.get(project, job_id)
        result: dict[str, dict[str, list[tuple[float, float]]]] = {}
        with self.platform.session() as session:
            for figure, fields in sorted(job.figures.items()):
                for series, curve in sorted(fields.get("envelopes", {}).items()):
                    if curve["count"] > max_points:
                        points = envelope.points(curve, max_points)
                    else:
                        rows = session.execute(
                            select(Metric.x, Metric.value)
                            .where(Metric.job_id == job.id, Metric.series == series, Metric.figure == figure)
                            .order_by(Metric.step)
                        )
                        points = [(float(x), float(y)) for x, y in rows]
                    result.setdefault(figure, {})[series] = points
        return result

    def latest_metrics(self, project: str, job_id: str) -> dict[str, dict[str, tuple[float, float]]]:
        """Return figure -> series -> last point (x, value)."""
        job = self.get(project, job_id)
        with self.platform.session() as session:
            last = (
                select(Metric.figure, Metric.series, func.max(Metric.step).label("step"))
                .where(Metric.job_id == job.id)
                .group_by(Metric.figure, Metric.series)
                .subquery()
            )
            rows = session.execute(
                select(Metric.figure, Metric.series, Metric.x, Metric.value).join(
                    last,
                    and_(
                        Metric.job_id == job.id,
                        Metric.figure == last.c.figure,
                        Metric.series == last.c.series,
                        Metric.step == last.c.step,
                    ),
                )
            ).all()
        latest: dict[str, dict[str, tuple[float, float]]] = {}
        for figure, series, x, value in sorted(rows):
            latest.setdefault(figure, {})[series] = (x, value)
        return latest

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
