"""What a local job's supervisor process calls back: ingest events on a timer, record the end."""

from __future__ import annotations

import json
import logging
import time

from traitlets.config import Config

from ..catalog.jobs import Job
from ..errors import NotFound
from ..platform import Platform
from .launch import JobLaunch
from .runfolder import read_own_json, write_atomic

# With this module, so that a forkserver that preloads it (`forkserver._preload`) forks
# supervisors that have everything their first tick needs.
Platform.import_job_modules()

log = logging.getLogger(__name__)


class SupervisorCallbacks:
    """What a local job's supervisor calls: ingest events on a timer, record the end."""

    def __init__(self, config: dict) -> None:
        self.platform = Platform(config=Config(config))
        self.jobs = self.platform.jobs
        self.started_recorded = False
        self.unrecorded = False  # the job has no record: its submit failed after starting it

    def tick(self, launch: JobLaunch) -> None:
        """Ingest new events; stop the job if it asked or has no record; record its pids and limits once."""
        if self.unrecorded:
            return
        if not self.started_recorded:
            handle = read_own_json(launch.run_dir / "handle.json")
            # under the ledger lock, which a submit holds from the job's start to its record's commit
            with self.platform.session(immediate=True) as session:
                job = session.get(Job, launch.job_id)
                if job is not None and handle is not None:
                    job.handle = {**job.handle, **handle}
                    job.enforcement = handle.get("enforcement", "")
                    self.started_recorded = True
            if job is None:
                self.unrecorded = True
                log.error("job %s has no record (its submit failed): stopping it", launch.job_id)
                write_atomic(
                    launch.run_dir / "stop.request", json.dumps({"grace_seconds": 0, "time": time.time()})
                )
                return
        if self.jobs.ingest(launch.job_id):
            job = self.jobs.records.job(launch.job_id)
            if not job.stop_requested and job.state == "running":
                self.jobs.stop(
                    launch.project, launch.job_id, reason="the job asked to be stopped (stop.kill)"
                )

    def record_usage(self, launch: JobLaunch, samples: list[dict]) -> None:
        """Store resource samples on the job (none for a job without a record)."""
        if not self.unrecorded:
            self.jobs.record_usage(launch.job_id, samples)

    def finish(self, launch: JobLaunch, status: dict) -> None:
        """Record the end, register outputs, release the reservation and start queued jobs."""
        try:
            if not self.unrecorded:
                self.jobs.finish(launch.job_id, status)
        except NotFound:  # it ended before its first tick could find that its submit failed
            log.error("job %s has no record (its submit failed): its end is not recorded", launch.job_id)
        finally:
            self.platform.close()


def supervisor_callbacks(config: dict) -> SupervisorCallbacks:
    """Return the callbacks of a supervisor (the factory named in supervisor.json)."""
    return SupervisorCallbacks(config)
