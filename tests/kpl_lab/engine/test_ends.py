"""Who records a job's end: the host, woken by the supervisor, or the supervisor itself."""

from __future__ import annotations

import json
import socket
import threading

import pytest

from kpl_lab.api.experiments import ExperimentRequest
from kpl_lab.catalog.rules import CAPACITY
from kpl_lab.engine.launch import JobLaunch
from kpl_lab.engine.runfolder import HOST
from kpl_lab.engine.service import JobRequest
from kpl_lab.errors import BadRequest
from kpl_lab.rounds import wake_path

from .conftest import WAIT_SECONDS

pytestmark = pytest.mark.databases

HOUR = 3600.0  # rounds and supervisor ticks that never come by themselves in a test
SAVES = """\
import os
import kpl_helper as kh
kept = os.path.join(os.environ["KPL_RUN_DIR"], "kept")  # a save must be in the run folder
os.makedirs(kept, exist_ok=True)
with open(os.path.join(kept, "weights.bin"), "w") as f:
    f.write("1")
kh.save_model(kept, "kept", "weights")
"""
SCORES = """\
import kpl_helper as kh
from kpl_helper import metric
p = kh.get_parameter(default="./parameter.yml")
metric.MetricFigure("score", y1_name="accuracy").push_metric(x=1, y1=p.quality)
"""
HELD = """\
import os, time
while not os.path.exists("RELEASE_FILE"):
    time.sleep(0.05)
"""


def status(lab, job_id: str) -> dict:
    return json.loads((lab.jobs.run_dir(lab.jobs.get("p", job_id)) / "status.json").read_text())


def test_a_short_jobs_end_is_recorded_by_the_host_on_its_wake(lab):
    """The supervisor never opens the platform: the host records the end in the round its wake starts."""
    lab = lab(round_seconds=HOUR, tick_seconds=HOUR)
    lab.algorithm("quick", "python -c 'print(1)'")
    job = lab.wait(lab.jobs.submit(JobRequest(project="p", algorithm="quick")).id)
    assert (job.state, job.exit_code, job.reason) == ("succeeded", 0, "")
    assert status(lab, job.id)["recorder"] == HOST
    assert job.usage["history"]  # the samples came with the status
    assert job.handle["enforcement"] == job.enforcement != ""  # the handle the supervisor wrote


def test_failing_short_job_recorded_by_the_host_keeps_its_reason(lab):
    lab = lab(round_seconds=HOUR, tick_seconds=HOUR)
    lab.algorithm("fails", "python -c 'import sys; print(\"bad input\"); sys.exit(3)'")
    job = lab.wait(lab.jobs.submit(JobRequest(project="p", algorithm="fails")).id)
    assert (job.state, job.exit_code, job.reason) == ("failed", 3, "exited with code 3: bad input")
    assert status(lab, job.id)["recorder"] == HOST


def test_a_searchs_next_trial_is_submitted_on_the_last_ones_end(lab):
    """No round comes by itself: each trial's end wakes the host, whose round records it and submits the next."""
    lab = lab(round_seconds=HOUR, tick_seconds=HOUR)
    lab.algorithm("scores", "python scores.py", {"scores.py": SCORES}, "quality: 0.5\n")
    body = {
        "name": "quick",
        "algorithm": "scores",
        "space": {"quality": {"type": "float", "low": 0.0, "high": 1.0}},
        "objective": {"metric": "score/accuracy"},
        "budget": {"trials": 3},
        "sampler": {"name": "random", "seed": 0},
    }
    lab.platform.experiments.create("p", ExperimentRequest.model_validate(body))
    lab.wait_for(lambda: lab.platform.experiments.get("p", "quick").state != "running", "the search's end")
    experiment = lab.platform.experiments.get("p", "quick")
    assert experiment.state == "succeeded", experiment.reason
    assert [trial.state for trial in experiment.trials] == ["complete"] * 3
    assert [status(lab, trial.job_id)["recorder"] for trial in experiment.trials] == [HOST] * 3


@pytest.mark.parametrize("how", ["output", "save"])
def test_a_job_that_registers_something_is_recorded_by_its_supervisor(lab, how):
    """Copying outputs is the supervisor's work, not the host's round (a round schedules everybody)."""
    lab = lab(round_seconds=HOUR, tick_seconds=HOUR)
    if how == "output":
        script = "import kpl_helper as kh\nopen(kh.io.get_output_path('model') + '/w.bin', 'w').write('1')\n"
        lab.algorithm("writes", "python writes.py", {"writes.py": script}, outputs=["model"])
    else:
        lab.algorithm("writes", "python writes.py", {"writes.py": SAVES})
    job = lab.wait(lab.jobs.submit(JobRequest(project="p", algorithm="writes")).id)
    assert job.state == "succeeded", job.reason
    assert "recorder" not in status(lab, job.id)
    registered = [o["registered"] for o in job.outputs.values()] + [s["registered"] for s in job.saves]
    assert [ref.split(":")[0] for ref in registered] == ["model"]


def test_an_end_left_to_a_host_that_did_not_record_it_is_recorded_by_the_next(lab):
    """A host that took the wake and died (or never ran a round): the next host's checks record it."""
    lab = lab(hosted=False, tick_seconds=HOUR)
    lab.algorithm("held", "python held.py", {"held.py": HELD})
    job = lab.jobs.submit(JobRequest(project="p", algorithm="held"))  # no host: started here
    run_dir = lab.jobs.run_dir(job)
    lab.wait_for(lambda: (run_dir / "handle.json").exists(), "the job's start")
    path = wake_path(lab.home)
    path.parent.mkdir(parents=True, exist_ok=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as silent:  # listens, never runs a round
        silent.bind(str(path))
        lab.release_file.touch()
        lab.wait_for(lambda: (run_dir / "status.json").exists(), "the supervisor's status")
        assert silent.recv(64)  # its wake came
    path.unlink()
    assert lab.jobs.get("p", job.id).state == "running"
    assert status(lab, job.id)["recorder"] == HOST
    lab.jobs.reconcile()  # as a host does at its start, whether or not the supervisor has left yet
    job = lab.jobs.get("p", job.id)
    assert (job.state, job.exit_code) == ("succeeded", 0)


def test_a_job_stored_after_its_end_was_left_to_the_host_wakes_it_again(lab, monkeypatch):
    """A round that ran before the job's record committed missed it: storing it wakes the host once more."""
    lab = lab(hosted=False)
    woken = []
    monkeypatch.setattr(lab.jobs.scheduler, "wake", lambda: woken.append(True))
    run_dir = lab.tmp_path / "run"
    run_dir.mkdir()
    launch = JobLaunch(
        job_id="j", project="p", function="train", cmd="true", algorithm_dir=run_dir, run_dir=run_dir
    )
    lab.platform.hosting = True
    try:
        lab.jobs.scheduler.caught_up(launch)
        assert woken == []  # no end yet: nothing to catch up
        (run_dir / "status.json").write_text(json.dumps({"exit_code": 0, "recorder": "supervisor"}))
        lab.jobs.scheduler.caught_up(launch)
        assert woken == []  # its supervisor records it
        (run_dir / "status.json").write_text(json.dumps({"exit_code": 0, "recorder": HOST}))
        lab.jobs.scheduler.caught_up(launch)
        assert woken == [True]
    finally:
        lab.platform.hosting = False


def test_quotas_are_in_place_for_a_thread_that_finds_the_capacity_seeded(lab):
    """Two threads of one process seed the rules: the second waits for the first's quotas, not just its capacity."""
    lab = lab(hosted=False, quotas={"p": {"memory": 512}})
    lab.algorithm("wide", "python x.py", memory=1024)
    ledger = lab.jobs.ledger
    load, written, arrived = ledger.rules.load, threading.Event(), threading.Event()

    def load_slowly(kind, name, value, seed=False):
        done = load(kind, name, value, seed)
        if kind == CAPACITY:  # the quotas come next: let the other thread get as far as it can first
            written.set()
            arrived.wait()
        return done

    class Seeding:  # the ledger's lock, saying when the other thread reaches it
        def __init__(self, lock):
            self.lock = lock

        def __enter__(self):
            if threading.current_thread() is not first:
                arrived.set()
            return self.lock.__enter__()

        def __exit__(self, *exc):
            return self.lock.__exit__(*exc)

    ledger.rules.load = load_slowly
    ledger._seeding = Seeding(getattr(ledger, "_seeding", threading.Lock()))
    first = threading.Thread(target=ledger.seed)
    first.start()
    assert written.wait(WAIT_SECONDS), "the first thread loads the capacity"
    try:
        with pytest.raises(BadRequest, match="project p allows 512"):
            lab.jobs.submit(JobRequest(project="p", algorithm="wide"))
    finally:
        arrived.set()  # before the fix the second thread never reached a lock
        first.join()
