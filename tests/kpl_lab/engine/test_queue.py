"""Why a queued job waits: what it lacks, what holds it, its place; real supervisors and processes."""

from __future__ import annotations

import pytest

from kpl_lab.engine.launch import Resources
from kpl_lab.engine.service import JobRequest
from kpl_lab.spawner.quota import release_notebook, reserve_notebook

pytestmark = pytest.mark.databases

WAIT_RELEASE = """\
import os, time
print("started", flush=True)
while not os.path.exists("RELEASE_FILE"):
    time.sleep(0.05)
"""


def test_a_job_waits_for_the_cpu_your_notebook_and_other_jobs_hold(lab):
    lab = lab(cpu=2.0, memory=8192)
    lab.algorithm("wide", "python wait.py", {"wait.py": WAIT_RELEASE}, cpu=2)
    lab.algorithm("narrow", "python wait.py", {"wait.py": WAIT_RELEASE}, cpu=1)
    ledger = lab.jobs.ledger
    assert reserve_notebook(ledger, "p", "alice/", Resources(cpu=1, memory=512), {}) is not None

    wide = lab.jobs.submit(JobRequest(project="p", algorithm="wide"), user="alice")
    assert wide.state == "queued"
    reason = lab.jobs.queue_reason(wide)
    assert (reason.limit, reason.waits_for, reason.position, reason.queued) == ("machine", ["cpu"], 1, 1)
    assert [(h.kind, h.id, h.user) for h in reason.held_by] == [("notebook", "alice/", "alice")]
    assert reason.message == "waits for 2 CPUs (1 free of 2); held by your notebook; 1st of 1 in the queue"

    # a later job of the same project waits behind it, even though 1 CPU is free
    behind = lab.jobs.submit(JobRequest(project="p", algorithm="narrow"), user="alice")
    assert behind.state == "queued"
    reason = lab.jobs.queue_reason(behind)
    assert (reason.limit, reason.behind, reason.position) == ("behind", wide.id, 2)
    assert reason.message == (
        f"waits behind job {wide.id} of project 'p' (first come, first served); 2nd of 2 in the queue"
    )

    # another project's job takes the free CPU; it is named without its id
    catalog = lab.platform.catalog
    catalog.add_algorithm("q", catalog.path(catalog.get_algorithm("p", "narrow")), name="narrow")
    other = lab.jobs.submit(JobRequest(project="q", algorithm="narrow"), user="bob")
    assert other.state == "running"
    reason = lab.jobs.queue_reason(lab.jobs.get("p", wide.id))
    assert [(h.kind, h.id, h.project) for h in reason.held_by] == [
        ("notebook", "alice/", "p"),
        ("job", None, None),
    ]
    assert "(0 free of 2); held by your notebook and a job of another project" in reason.message

    release_notebook(ledger, "alice/")
    lab.jobs.stop("q", other.id)
    assert lab.wait(wide.id, states=("running",)).state == "running"
    assert lab.jobs.queue_reason(lab.jobs.get("p", wide.id)) is None
    reason = lab.jobs.queue_reason(lab.jobs.get("p", behind.id))
    assert reason.message == f"waits for 1 CPU (0 free of 2); held by job {wide.id}; 1st of 1 in the queue"


def test_a_job_waits_for_its_projects_quota(lab):
    lab = lab(quotas={"p": {"cpu": 1}})
    lab.algorithm("narrow", "python wait.py", {"wait.py": WAIT_RELEASE}, cpu=1)
    first = lab.jobs.submit(JobRequest(project="p", algorithm="narrow"))
    second = lab.jobs.submit(JobRequest(project="p", algorithm="narrow"))
    assert (first.state, second.state) == ("running", "queued")
    reason = lab.jobs.queue_reason(second)
    assert (reason.limit, reason.waits_for) == ("quota", ["cpu"])
    assert reason.message == (
        f"waits for 1 CPU (project 'p' allows 1, 1 in use); held by job {first.id}; 1st of 1 in the queue"
    )
    lab.release_file.touch()
    assert lab.wait(second.id).state == "succeeded"
