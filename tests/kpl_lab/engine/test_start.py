"""A job started before its record commits: a commit that fails, or a server that dies, leaves no job running."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sqlalchemy import func, select, text

from kpl_lab.catalog.jobs import Job, Reservation
from kpl_lab.engine.service import JobRequest

pytestmark = pytest.mark.databases

WAIT_RELEASE = """\
import os, time
print("started", flush=True)
while not os.path.exists("RELEASE_FILE"):
    time.sleep(0.05)
print("released", flush=True)
"""


def refuse_job_inserts(platform) -> None:
    """Make the database refuse to insert the jobs of the `refused` algorithm (a failing commit)."""
    with platform.engine.begin() as connection:
        if connection.dialect.name == "sqlite":
            connection.execute(
                text(
                    "CREATE TRIGGER refuse_job BEFORE INSERT ON jobs WHEN NEW.algorithm_ref LIKE 'refused:%' "
                    "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
                )
            )
        else:
            connection.execute(
                text(
                    "CREATE FUNCTION refuse_job() RETURNS trigger AS $$ BEGIN "
                    "RAISE EXCEPTION 'refused by the test'; END $$ LANGUAGE plpgsql"
                )
            )
            connection.execute(
                text(
                    "CREATE TRIGGER refuse_job BEFORE INSERT ON jobs FOR EACH ROW "
                    "WHEN (NEW.algorithm_ref LIKE 'refused:%') EXECUTE FUNCTION refuse_job()"
                )
            )


def run_folders(lab) -> list:
    jobs = lab.platform.storage.kind_dir("p", "jobs")
    return [path for path in jobs.iterdir() if (path / "job.json").exists()] if jobs.exists() else []


def wait_stopped(lab, run_dir):
    """Wait for the supervisor's status.json and return it (the job must not have run to its end)."""
    lab.wait_for(lambda: (run_dir / "status.json").exists(), "the supervisor to record the end")
    return json.loads((run_dir / "status.json").read_text())


def assert_nothing_recorded(lab) -> None:
    with lab.platform.session() as session:
        assert session.scalar(select(func.count()).select_from(Job)) == 0
        assert session.scalar(select(func.count()).select_from(Reservation)) == 0


def test_a_commit_that_fails_stops_the_started_job(lab):
    lab = lab()
    lab.algorithm("refused", "python wait.py", {"wait.py": WAIT_RELEASE})
    refuse_job_inserts(lab.platform)
    with pytest.raises(Exception, match="refused by the test"):
        lab.jobs.submit(JobRequest(project="p", algorithm="refused"))
    assert_nothing_recorded(lab)  # the reservation went with the transaction
    (run_dir,) = run_folders(lab)  # the job had started: its supervisor stops it
    status = wait_stopped(lab, run_dir)
    assert status["stopped"] is True
    assert "released" not in (run_dir / "output.log").read_text()
    # the machine is free again: the next job starts at once
    lab.algorithm("wait", "python wait.py", {"wait.py": WAIT_RELEASE})
    job = lab.jobs.submit(JobRequest(project="p", algorithm="wait"))
    assert job.state == "running"
    lab.release_file.touch()
    assert lab.wait(job.id).state == "succeeded"


def test_a_supervisor_whose_job_has_no_record_stops_it(lab):
    lab = lab(hosted=False)  # the dying server starts the job itself
    lab.algorithm("refused", "python wait.py", {"wait.py": WAIT_RELEASE})
    refuse_job_inserts(lab.platform)
    # a server that dies after starting the job, before its record is stored or the job stopped
    server = textwrap.dedent(
        f"""
        import os, sys
        sys.path[:0] = {sys.path!r}
        from conftest import make_platform
        from kpl_lab.engine.scheduling import Scheduler
        from kpl_lab.engine.service import JobRequest

        Scheduler.abandon = lambda self, launch, handle: os._exit(3)
        platform = make_platform({str(lab.home)!r}, {lab.database_url!r}, **{lab.ledger!r})
        platform.jobs.submit(JobRequest(project="p", algorithm="refused"))
        """
    )
    done = subprocess.run([sys.executable, "-c", server], cwd=str(Path(__file__).parent), timeout=120)
    assert done.returncode == 3
    assert_nothing_recorded(lab)
    (run_dir,) = run_folders(lab)
    status = wait_stopped(lab, run_dir)
    assert status["stopped"] is True
    assert "released" not in (run_dir / "output.log").read_text()
    assert "has no record" in (run_dir / "supervisor.log").read_text()
