"""Resource use of running jobs: sampled by the supervisor, stored on the job, bounded."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kpl_lab.engine.service import JobRequest
from kpl_lab.engine.usage import HISTORY, UsageSampler, merge

pytestmark = pytest.mark.databases

HOLD_MEMORY = """\
import os, time
data = b"\\x01" * (200 * 1024 * 1024)  # written, so resident
print("holding", len(data), flush=True)
while not os.path.exists("RELEASE_FILE"):
    time.sleep(0.05)
"""


def test_job_memory_is_sampled_with_its_peak(lab):
    lab = lab()
    lab.algorithm("hold", "python hold.py", {"hold.py": HOLD_MEMORY}, memory=1024)
    job = lab.jobs.submit(JobRequest(project="p", algorithm="hold"))
    lab.wait_for(
        lambda: (lab.jobs.usage("p", job.id).get("latest") or {}).get("memory_mb", 0) >= 200,
        "a sample of the job holding 200 MB",
    )
    running = lab.jobs.usage("p", job.id)
    assert running["peak_memory_mb"] >= 200
    assert running["latest"]["processes"] >= 1
    assert "gpus" not in running["latest"]  # no GPU assigned (and no driver here)
    lab.wait_for(
        lambda: any(s["cpu_percent"] is not None for s in lab.jobs.usage("p", job.id)["history"]),
        "a cpu figure (it needs two samples)",
    )
    lab.release_file.touch()
    assert lab.wait(job.id).state == "succeeded"
    final = lab.jobs.usage("p", job.id)
    assert final["peak_memory_mb"] >= 200  # kept after the job ended
    assert 2 <= len(final["history"]) <= HISTORY
    times = [s["time"] for s in final["history"]]
    assert times == sorted(times)


def test_sampler_follows_a_process_group_without_a_cgroup():
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; d = b'x' * (64 * 2**20); sys.stdin.read()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        sampler = UsageSampler(child.pid)
        while child.poll() is None and sampler.sample()["memory_mb"] < 64:
            pass  # the child is still allocating
        sample = sampler.sample()
        assert sample["processes"] == 1 and sample["peak_memory_mb"] >= 64
        assert sample["cpu_percent"] is not None and sample["cpu_percent"] >= 0
    finally:
        child.communicate(b"")
    assert child.returncode == 0


def test_history_is_bounded_and_the_peak_survives_it():
    usage: dict = {}
    usage = merge(usage, [{"time": 0, "memory_mb": 900.0, "peak_memory_mb": 900.0}])
    for start in range(0, 2000, 100):
        samples = [{"time": t, "memory_mb": 10.0, "peak_memory_mb": 10.0} for t in range(start, start + 100)]
        usage = merge(usage, samples, history=HISTORY)
    assert len(usage["history"]) == HISTORY
    assert usage["history"][-1]["time"] == 1999 and usage["latest"]["time"] == 1999
    assert usage["peak_memory_mb"] == 900.0
    assert merge(usage, []) is usage
