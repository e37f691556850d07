"""What a local job's supervisor process calls back: ingest events on a timer, record the end."""

from __future__ import annotations

from traitlets.config import Config

from ..catalog.jobs import Job
from .launch import JobLaunch
from .runfolder import read_json


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
            job = self.jobs.records.job(launch.job_id)
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
