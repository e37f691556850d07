"""A dead supervisor is noticed by the server's background round, with no restart and no CLI."""

import asyncio
import os
import signal

from sqlalchemy import func, select

from kpl_lab.catalog.jobs import Job, Reservation
from kpl_lab.engine.runfolder import is_alive

from .test_jobs_api import WAIT, add_algorithm

DONE = """\
import os
import kpl_helper as kh
out = kh.io.get_output_path("model", "/nonexistent")
with open(os.path.join(out, "weights.bin"), "w") as f:
    f.write("trained")
kh.done()
"""


def extension(jp_serverapp):
    return next(e for e in jp_serverapp.extension_manager.extension_apps["kpl_lab"])


async def started_handle(app, job_id: str) -> dict:
    """Wait until the job's process runs and return its handle."""
    for _ in range(600):
        with app.platform.session() as session:
            handle = session.scalar(select(Job.handle).where(Job.id == job_id)) or {}
        if handle.get("pid"):
            return handle
        await asyncio.sleep(0.2)
    raise AssertionError(f"job {job_id} never started")


async def wait_dead(pid: int, start: int) -> None:
    while is_alive(pid, start):
        await asyncio.sleep(0.05)


async def test_killed_supervisor_job_that_finishes_succeeds(api, tmp_path, jp_serverapp):
    release = tmp_path / "release"
    await add_algorithm(api, "waiter", WAIT.replace("RELEASE_FILE", str(release)) + DONE, outputs=["model"])
    _, job = await api.post("jobs", {"algorithm": "waiter"})
    handle = await started_handle(extension(jp_serverapp), job["id"])
    os.kill(handle["supervisor_pid"], signal.SIGKILL)
    await wait_dead(handle["supervisor_pid"], handle["supervisor_start"])
    release.touch()
    job = await api.wait_job(job["id"])
    assert job["state"] == "succeeded", job
    code, model = await api.get("models/waiter-model")
    assert code == 200 and model["versions"], model


async def test_killed_supervisor_and_job_are_lost_and_released(api, tmp_path, jp_serverapp):
    app = extension(jp_serverapp)
    await add_algorithm(api, "waiter", WAIT.replace("RELEASE_FILE", str(tmp_path / "never")))
    _, job = await api.post("jobs", {"algorithm": "waiter"})
    handle = await started_handle(app, job["id"])
    os.kill(handle["supervisor_pid"], signal.SIGKILL)
    os.killpg(handle["pgid"], signal.SIGKILL)
    job = await api.wait_job(job["id"])
    assert job["state"] == "lost" and job["reason"].startswith("lost:"), job
    with app.platform.session() as session:
        assert session.scalar(select(func.count()).select_from(Reservation)) == 0
