"""The platform's log (JSON lines, rotated, bounded) and the search over it and the jobs' output."""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from kpl_lab.catalog.jobs import Job
from kpl_lab.catalog.models import Project
from kpl_lab.monitoring.logs import PlatformLogs


@pytest.fixture
def logs(platform):
    found = PlatformLogs(platform, max_bytes=4000, backups=2)
    yield found
    found.stop()


def test_the_log_is_rotated_and_bounded(logs):
    path = logs.start("test-host", ("kpl_lab.test",))
    log = logging.getLogger("kpl_lab.test")
    for index in range(400):
        log.info("line %d of the platform's own log", index)
    files = sorted(path.parent.iterdir())
    assert [f.name for f in files] == ["test-host.log", "test-host.log.1", "test-host.log.2"]
    assert all(f.stat().st_size <= 4000 for f in files)
    found = logs.search(text="line 399")
    assert [line.line for line in found.lines] == ["INFO kpl_lab.test: line 399 of the platform's own log"]
    assert len(logs.search(limit=1000).lines) < 400  # the oldest lines went with the oldest file


def test_platform_lines_are_found_by_user_project_and_time(logs):
    logs.start("test-host", ("kpl_lab.test",))
    log = logging.getLogger("kpl_lab.test")
    log.warning("quota refused", extra={"user": "alice", "project": "vision"})
    log.warning("quota refused", extra={"user": "bob", "project": "audio"})
    [line] = logs.search(text="QUOTA", user="alice").lines
    assert (line.user, line.project) == ("alice", "vision") and line.line.startswith("WARNING")
    assert [line.user for line in logs.search(project="audio").lines] == ["bob"]
    later = datetime.now(UTC) + timedelta(minutes=1)
    assert logs.search(since=later).lines == []
    assert len(logs.search(until=later).lines) == 2


def job_with_output(platform, job_id: str, text: str) -> Path:
    with platform.session() as session:
        project = session.query(Project).filter_by(name="vision").one_or_none() or Project(name="vision")
        session.add(project)
        session.flush()
        session.add(Job(id=job_id, project_id=project.id, function="train", state="failed", user="alice"))
    with platform.session() as session:
        run_dir = platform.jobs.run_dir(session.get(Job, job_id))
    run_dir.mkdir(parents=True)
    (run_dir / "output.log").write_text(text)
    return run_dir


def test_a_jobs_output_is_read_from_its_end_and_a_link_is_not_followed(platform, logs, tmp_path):
    job_with_output(platform, "job-1", "".join(f"step {i}\n" for i in range(1000)) + "Traceback: boom\n")
    found = logs.search(source="job", text="traceback")
    assert [(line.name, line.line) for line in found.lines] == [("job-1", "Traceback: boom")]
    secret = tmp_path / "secret.txt"
    secret.write_text("Traceback: the platform's secret\n")
    run_dir = job_with_output(platform, "job-2", "")
    (run_dir / "output.log").unlink()
    os.symlink(secret, run_dir / "output.log")
    assert [line.name for line in logs.search(source="job", text="traceback").lines] == ["job-1"]
    assert logs.search(source="job", user="bob").lines == []
