"""Jobs end to end: real supervisors, real processes, real cgroups where writable."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from pathlib import Path

import pytest
from sqlalchemy import func, select

from kpl_lab.catalog.jobs import Job, Metric, Reservation
from kpl_lab.engine.records import LOG_CHUNK
from kpl_lab.engine.runfolder import is_alive, process_start_time
from kpl_lab.engine.service import JobRequest
from kpl_lab.errors import BadRequest, Conflict, NotFound

from .conftest import environment

pytestmark = pytest.mark.databases

TRAIN = """\
import os
import kpl_helper as kh
from kpl_helper import metric, progress

p = kh.get_parameter(default={"epochs": 3})
figure = metric.MetricFigure("loss", y1_name="train", y2_name="val")
for epoch in range(p.epochs):
    figure.push_metric(x=epoch, y1=1.0 / (epoch + 1), y2=2.0 / (epoch + 1))
    progress.send_progress((epoch + 1) / p.epochs)
    print("epoch", epoch, flush=True)
out = kh.io.get_output_path("model", "/nonexistent")
with open(os.path.join(out, "weights.bin"), "w") as f:
    f.write("epochs=%d" % p.epochs)
kh.done()
"""

WAIT_RELEASE = """\
import os, sys, time
print("started", os.environ.get("CUDA_VISIBLE_DEVICES"), flush=True)
while not os.path.exists("RELEASE_FILE"):
    time.sleep(0.05)
print("released", flush=True)
"""


def test_submit_runs_and_ingests_events(lab):
    lab = lab()
    version = lab.algorithm("train", "python train.py", {"train.py": TRAIN}, "epochs: 3\n", outputs=["model"])
    job = lab.jobs.submit(JobRequest(project="p", algorithm="train", parameters={"epochs": 4}))
    assert job.state == "running"
    job = lab.wait(job.id)
    assert (job.state, job.exit_code, job.reason) == ("succeeded", 0, "")
    assert job.enforcement  # cgroup or the stated fallback
    assert job.progress == 1.0
    assert lab.jobs.progress(lab.jobs.get("p", job.id)) == (1.0, 0.0)
    assert lab.jobs.metrics("p", job.id) == {
        "loss": {
            "train": [(0.0, 1.0), (1.0, 0.5), (2.0, 1 / 3), (3.0, 0.25)],
            "val": [(0.0, 2.0), (1.0, 1.0), (2.0, 2 / 3), (3.0, 0.5)],
        }
    }
    assert job.figures["loss"]["y1_name"] == "train"
    assert [line for line in lab.jobs.follow_logs("p", job.id) if line.startswith("epoch")] == [
        "epoch 0",
        "epoch 1",
        "epoch 2",
        "epoch 3",
    ]
    registered = job.outputs["model"]["registered"]
    assert registered.startswith("model:train-model:")  # <algorithm>-<output key>
    model = lab.platform.catalog.get_model("p", registered.removeprefix("model:"))
    assert model.lineage["job_id"] == job.id
    assert model.lineage["algorithm"] == version.ref
    assert model.lineage["parameters"] == {"epochs": 4}
    assert model.lineage["metrics"] == {"loss/train": 0.25, "loss/val": 0.5}  # the values at the end
    assert (lab.platform.catalog.path(model) / "weights.bin").read_text() == "epochs=4"
    with lab.platform.session() as session:
        assert session.scalar(select(func.count()).select_from(Reservation)) == 0
        before = session.scalar(select(func.count()).select_from(Metric))
    lab.jobs.ingest(job.id)  # idempotent: the offset is stored with the points
    with lab.platform.session() as session:
        assert session.scalar(select(func.count()).select_from(Metric)) == before


def test_failing_exit_code_keeps_last_lines(lab):
    lab = lab()
    lab.algorithm(
        "bad", "python bad.py", {"bad.py": "print('loading data')\nraise SystemExit('no labels in data')\n"}
    )
    job = lab.wait(lab.jobs.submit(JobRequest(project="p", algorithm="bad")).id)
    assert job.state == "failed"
    assert job.exit_code == 1
    assert job.reason == "exited with code 1: no labels in data"
    assert "loading data" in job.last_log_lines


def test_command_not_found(lab):
    lab = lab()
    lab.algorithm("missing", "no-such-trainer --epochs 3")
    job = lab.wait(lab.jobs.submit(JobRequest(project="p", algorithm="missing")).id)
    assert job.state == "failed"
    assert job.reason == "command not found: no-such-trainer"


def test_memory_limit_exceeded_is_reported(lab):
    lab = lab()
    hog = "data = bytearray(300 * 1024 * 1024)\nfor i in range(0, len(data), 4096):\n    data[i] = 1\n"
    lab.algorithm("hog", "python hog.py", {"hog.py": hog}, memory=64)
    job = lab.wait(lab.jobs.submit(JobRequest(project="p", algorithm="hog")).id)
    assert job.state == "failed"
    assert job.reason.startswith("exceeded its memory limit of 64 MB"), job.reason


def test_refused_when_larger_than_the_machine(lab):
    lab = lab(devices={"gpu": [{"index": 0, "name": "A100"}, {"index": 1, "name": "A100"}]})
    lab.algorithm("big", "python x.py", gpu=3)
    with pytest.raises(BadRequest, match="asks 3 GPUs; this machine has 2"):
        lab.jobs.submit(JobRequest(project="p", algorithm="big"))
    with pytest.raises(BadRequest, match="asks 8 CPUs; this machine has 4"):
        lab.jobs.submit(JobRequest(project="p", algorithm="big", resources={"cpu": 8, "gpu": 1}))
    assert lab.jobs.list("p") == []


def test_refused_over_the_project_quota(lab):
    lab = lab(quotas={"p": {"memory": 512}})
    lab.algorithm("wide", "python x.py", memory=1024)
    with pytest.raises(BadRequest, match="asks 1024 MB of memory; project p allows 512"):
        lab.jobs.submit(JobRequest(project="p", algorithm="wide"))


def test_queues_until_resources_are_released(lab):
    lab = lab(cpu=1.0)
    lab.algorithm("wait", "python wait.py", {"wait.py": WAIT_RELEASE})
    first = lab.jobs.submit(JobRequest(project="p", algorithm="wait"))
    second = lab.jobs.submit(JobRequest(project="p", algorithm="wait"))
    assert (first.state, second.state) == ("running", "queued")
    lab.wait_for(lambda: "started" in "\n".join(lab.jobs.follow_logs("p", first.id)), "the first job")
    assert lab.jobs.get("p", second.id).state == "queued"
    lab.release_file.touch()
    assert lab.wait(first.id).state == "succeeded"
    second = lab.wait(second.id)
    assert second.state == "succeeded"
    assert second.started >= lab.jobs.get("p", first.id).finished


def test_gpu_assignment_from_declared_inventory(lab):
    lab = lab(devices={"gpu": [{"index": 0, "name": "A100"}, {"index": 1, "name": "A100"}]})
    lab.algorithm("gpu", "python wait.py", {"wait.py": WAIT_RELEASE}, gpu=1)
    first = lab.jobs.submit(JobRequest(project="p", algorithm="gpu"))
    second = lab.jobs.submit(JobRequest(project="p", algorithm="gpu"))
    third = lab.jobs.submit(JobRequest(project="p", algorithm="gpu"))
    assert [first.state, second.state, third.state] == ["running", "running", "queued"]
    assert sorted([first.assigned_devices["gpu"], second.assigned_devices["gpu"]]) == [[0], [1]]
    lab.release_file.touch()
    for job in (first, second, third):
        job = lab.wait(job.id)
        assert job.state == "succeeded"
        seen = next(line for line in lab.jobs.follow_logs("p", job.id) if line.startswith("started"))
        assert seen == f"started {job.assigned_devices['gpu'][0]}"


def test_stop_escalates_to_sigkill(lab):
    lab = lab()
    stubborn = (
        "import signal, time\nsignal.signal(signal.SIGTERM, lambda *a: print('ignoring SIGTERM', flush=True))\n"
        "print('ready', flush=True)\nwhile True:\n    time.sleep(0.05)\n"
    )
    lab.algorithm("stubborn", "python stubborn.py", {"stubborn.py": stubborn})
    job = lab.jobs.submit(JobRequest(project="p", algorithm="stubborn"))
    lab.wait_for(lambda: "ready" in list(lab.jobs.follow_logs("p", job.id)), "the job to be ready")
    lab.jobs.stop("p", job.id)
    job = lab.wait(job.id)
    assert job.state == "stopped"
    assert job.reason == "stopped on request (SIGKILL after 1 s)"
    assert "ignoring SIGTERM" in job.last_log_lines
    with pytest.raises(Conflict):
        lab.jobs.stop("p", job.id)


def test_stop_a_queued_job(lab):
    lab = lab(cpu=1.0)
    lab.algorithm("wait", "python wait.py", {"wait.py": WAIT_RELEASE})
    lab.jobs.submit(JobRequest(project="p", algorithm="wait"))
    queued = lab.jobs.submit(JobRequest(project="p", algorithm="wait"))
    stopped = lab.jobs.stop("p", queued.id)
    assert (stopped.state, stopped.reason) == ("stopped", "stopped before it started")


def test_restart_reattaches_running_jobs(lab):
    lab = lab(hosted=False)  # the test runs the restart's rounds itself
    lab.algorithm("wait", "python wait.py", {"wait.py": WAIT_RELEASE})
    job = lab.jobs.submit(JobRequest(project="p", algorithm="wait"))
    lab.wait_for(
        lambda: (
            "started None" in "\n".join(lab.jobs.follow_logs("p", job.id))
            or "started " in "\n".join(lab.jobs.follow_logs("p", job.id))
        ),
        "the job to start",
    )
    lab.restart()  # the server side goes away; the job and its supervisor do not
    assert lab.jobs.reconcile() == {job.id: "running"}
    lab.release_file.touch()
    assert lab.wait(job.id).state == "succeeded"


def test_reconcile_leaves_a_job_another_process_is_starting(lab):
    lab = lab(cpu=1.0, hosted=False)  # the test runs the restart's rounds itself
    lab.algorithm("wait", "python wait.py", {"wait.py": WAIT_RELEASE})
    lab.jobs.submit(JobRequest(project="p", algorithm="wait"))
    queued = lab.jobs.submit(JobRequest(project="p", algorithm="wait"))
    # what a server or another CLI leaves between marking a job running and storing its handle
    starter = subprocess.Popen(["sleep", "60"])
    with lab.platform.session(immediate=True) as session:  # read then write, beside supervisors that write
        row = session.get(Job, queued.id)
        row.state, row.handle = "running", {"launcher": [starter.pid, process_start_time(starter.pid)]}
    assert queued.id not in lab.jobs.reconcile()
    assert lab.jobs.get("p", queued.id).state == "running"
    starter.kill()
    starter.wait()
    assert lab.jobs.reconcile()[queued.id] == "lost"  # its starter died before the job began


def test_job_and_supervisor_killed_is_lost(lab):
    lab = lab(hosted=False)  # the test runs the restart's rounds itself
    lab.algorithm("wait", "python wait.py", {"wait.py": WAIT_RELEASE})
    job = lab.jobs.submit(JobRequest(project="p", algorithm="wait"))
    lab.wait_for(lambda: lab.jobs.get("p", job.id).handle.get("pid"), "the job's pid")
    handle = lab.jobs.get("p", job.id).handle
    lab.restart()
    os.kill(handle["supervisor_pid"], signal.SIGKILL)
    os.killpg(handle["pgid"], signal.SIGKILL)
    lab.wait_for(lambda: not is_alive(handle["pid"], handle["pid_start"]), "the job to die")
    lab.wait_for(lambda: not is_alive(handle["supervisor_pid"], handle["supervisor_start"]), "the supervisor")
    assert lab.jobs.reconcile() == {job.id: "lost"}
    job = lab.jobs.get("p", job.id)
    assert job.reason.startswith("lost:")
    assert not any(Path(path).exists() for path in handle["limits"]["paths"].values())
    with lab.platform.session() as session:
        assert session.scalar(select(func.count()).select_from(Reservation)) == 0


def test_supervisor_killed_job_adopted(lab):
    lab = lab(hosted=False)  # the test runs the restart's rounds itself
    lab.algorithm(
        "wait", "python wait.py", {"wait.py": WAIT_RELEASE + "import kpl_helper\nkpl_helper.done()\n"}
    )
    job = lab.jobs.submit(JobRequest(project="p", algorithm="wait"))
    lab.wait_for(lambda: lab.jobs.get("p", job.id).handle.get("pid"), "the job's pid")
    handle = lab.jobs.get("p", job.id).handle
    os.kill(handle["supervisor_pid"], signal.SIGKILL)
    lab.wait_for(lambda: not is_alive(handle["supervisor_pid"], handle["supervisor_start"]), "the supervisor")
    assert lab.jobs.reconcile() == {job.id: "running"}
    lab.release_file.touch()
    job = lab.wait(job.id)
    assert job.state == "succeeded"  # exit code unknown, but it reported done
    assert job.exit_code is None


def test_job_that_reported_done_after_its_supervisor_died_succeeds(lab):
    lab = lab(hosted=False)  # the test runs the restart's reconcile itself
    script = WAIT_RELEASE + (
        "import kpl_helper as kh\n"
        "open(os.path.join(kh.io.get_output_path('model', '/nonexistent'), 'w.bin'), 'w').close()\n"
        "kh.done()\n"
    )
    lab.algorithm("wait", "python wait.py", {"wait.py": script}, outputs=("model",))
    job = lab.jobs.submit(JobRequest(project="p", algorithm="wait"))
    lab.wait_for(lambda: lab.jobs.get("p", job.id).handle.get("pid"), "the job's pid")
    handle = lab.jobs.get("p", job.id).handle
    os.kill(handle["supervisor_pid"], signal.SIGKILL)
    lab.release_file.touch()
    lab.wait_for(lambda: not is_alive(handle["pid"], handle["pid_start"]), "the job to end")
    lab.wait_for(lambda: not is_alive(handle["supervisor_pid"], handle["supervisor_start"]), "the supervisor")
    assert lab.jobs.tick() == [job.id]  # the background round notices, no restart needed
    job = lab.jobs.get("p", job.id)
    assert (job.state, job.exit_code) == ("succeeded", None)
    assert job.outputs["model"]["registered"].startswith("model:")
    with lab.platform.session() as session:
        assert session.scalar(select(func.count()).select_from(Reservation)) == 0


def test_concurrent_submits_never_over_reserve(lab):
    lab = lab(cpu=5.0, hosted=False)  # submits from threads, as a busy server takes them
    lab.algorithm("wait", "python wait.py", {"wait.py": WAIT_RELEASE})
    ids, errors = [], []

    def submit() -> None:
        try:
            ids.append(lab.jobs.submit(JobRequest(project="p", algorithm="wait")).id)
        except Exception as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=submit) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    states = [lab.jobs.get("p", job_id).state for job_id in ids]
    assert states.count("running") == 5 and states.count("queued") == 15
    with lab.platform.session() as session:
        assert session.scalar(select(func.sum(Reservation.cpu))) == 5.0
    lab.rounds.start(0.2)  # the queued ones start as the first end: the host's rounds start them
    lab.release_file.touch()
    assert {lab.wait(job_id).state for job_id in ids} == {"succeeded"}


def test_follow_logs_live_with_bounded_lines(lab):
    lab = lab()
    talk = (
        "import sys, time\nsys.stdout.write('x' * 1_000_000 + '\\n')\nfor i in range(5):\n"
        "    print('line', i, flush=True)\n    time.sleep(0.1)\n"
    )
    lab.algorithm("talk", "python talk.py", {"talk.py": talk})
    job = lab.jobs.submit(JobRequest(project="p", algorithm="talk"))
    lines = list(lab.jobs.follow_logs("p", job.id, follow=True))
    assert lab.jobs.get("p", job.id).state == "succeeded"  # following ended with the job
    assert max(len(line) for line in lines) <= 2 * LOG_CHUNK
    assert sum(len(line) for line in lines if line.startswith("x")) == 1_000_000
    assert [line for line in lines if line.startswith("line")] == [f"line {i}" for i in range(5)]


def test_metrics_downsampled(lab):
    lab = lab()
    many = (
        "from kpl_helper import metric\nimport kpl_helper\nf = metric.MetricFigure('loss', y1_name='train')\n"
        "for i in range(5000):\n    f.push_metric(x=i, y1=-1.0 if i == 1234 else (9.0 if i == 4321 else i % 7))\n"
        "kpl_helper.done()\n"
    )
    lab.algorithm("many", "python many.py", {"many.py": many})
    job = lab.wait(lab.jobs.submit(JobRequest(project="p", algorithm="many")).id)
    assert len(lab.jobs.metrics("p", job.id, max_points=10_000)["loss"]["train"]) == 5000
    points = lab.jobs.metrics("p", job.id, max_points=100)["loss"]["train"]
    assert len(points) <= 100
    assert (1234.0, -1.0) in points and (4321.0, 9.0) in points
    assert [x for x, _ in points] == sorted(x for x, _ in points)


def test_copy_rerun_and_resume(lab):
    lab = lab()
    seen = 'root = os.environ["KPL_ENV_INPUT_ROOT_PATH"]\nprint("checkpoint", os.listdir(root))\nkh.done()'
    resume = TRAIN.replace("kh.done()", seen)
    lab.algorithm(
        "train",
        "python train.py",
        {"train.py": resume},
        "epochs: 2\n",
        inputs=["checkpoint"],
        outputs=["model"],
    )
    first = lab.wait(lab.jobs.submit(JobRequest(project="p", algorithm="train")).id)
    assert first.state == "succeeded"
    copy = lab.wait(lab.jobs.copy("p", first.id, parameters={"epochs": 3}).id)
    assert (copy.copied_from, copy.parameters) == (first.id, {"epochs": 3})
    rerun = lab.wait(lab.jobs.rerun("p", first.id).id)
    assert (rerun.copied_from, rerun.parameters, rerun.algorithm_ref) == (
        first.id,
        {"epochs": 2},
        first.algorithm_ref,
    )
    resumed = lab.wait(lab.jobs.resume("p", copy.id).id)
    assert resumed.state == "succeeded"
    assert resumed.resumed_from == copy.id
    assert f"model:{resumed.inputs['checkpoint']['version']}" == copy.outputs["model"]["registered"]
    assert "checkpoint ['checkpoint']" in list(lab.jobs.follow_logs("p", resumed.id))
    assert "checkpoint []" in list(lab.jobs.follow_logs("p", first.id))


def test_unknown_input_key_is_refused(lab):
    lab = lab()
    lab.algorithm("train", "python x.py", inputs=["data"])
    with pytest.raises(
        BadRequest, match="inputs.images: the train function of train:[0-9a-f]+ has no such input"
    ):
        lab.jobs.submit(JobRequest(project="p", algorithm="train", inputs={"images": "mnist"}))


DISTRIBUTED = """\
import os, sys, time
import kpl_helper as kh
from kpl_helper import metric, progress

rank = kh.get_rank()
print("worker", rank, "of", kh.get_world_size(), "devices", os.environ["CUDA_VISIBLE_DEVICES"], flush=True)
metric.MetricFigure("loss", y1_name="train").push_metric(x=0, y1=float(rank))
progress.send_progress(0.5 + rank / 4)
if rank == int(kh.get_parameter(default={"fail": -1}).fail):
    sys.exit("worker %d: out of patience" % rank)
while not os.path.exists("RELEASE_FILE"):
    time.sleep(0.05)
"""


def test_a_job_of_two_workers_is_one_job(lab):
    lab = lab(devices={"gpu": [{"index": 0}, {"index": 1}, {"index": 2}]})
    lab.algorithm("ddp", "python ddp.py", {"ddp.py": DISTRIBUTED}, "fail: -1\n", gpu=1)
    job = lab.jobs.submit(
        JobRequest(project="p", algorithm="ddp", resources={"workers": 2, "cpu": 1, "memory": 256})
    )
    assert (job.state, job.limits["workers"], job.assigned_devices) == ("running", 2, {"gpu": [0, 1]})
    with lab.platform.session() as session:
        held = session.scalars(select(Reservation)).one()
        assert (held.cpu, held.memory) == (2, 512)
    with pytest.raises(BadRequest, match="asks 6 CPUs \\(2 workers × 3 CPUs\\); this machine has 4"):
        lab.jobs.submit(JobRequest(project="p", algorithm="ddp", resources={"workers": 2, "cpu": 3}))
    lab.wait_for(lambda: len(lab.jobs.get("p", job.id).handle.get("workers", [])) == 2, "both workers")

    def reported() -> float:
        lab.jobs.ingest(job.id)
        return lab.jobs.get("p", job.id).progress

    lab.wait_for(lambda: reported() > 0, "a progress report")
    assert reported() == 0.5  # rank 0's: rank 1's 0.75 is not sent
    lab.release_file.touch()
    job = lab.wait(job.id)
    assert job.state == "succeeded"
    assert job.progress == 1.0
    assert list(lab.jobs.follow_logs("p", job.id)) == ["worker 0 of 2 devices 0"]
    assert list(lab.jobs.follow_logs("p", job.id, worker=1)) == ["worker 1 of 2 devices 1"]
    with pytest.raises(NotFound, match="job .* has 2 workers: worker 2 does not exist"):
        lab.jobs.follow_logs("p", job.id, worker=2).__next__()
    assert lab.jobs.metrics("p", job.id) == {"loss": {"train": [(0.0, 0.0)]}}  # rank 0's only
    assert lab.jobs.rerun("p", job.id).limits["workers"] == 2


def test_a_failing_worker_fails_the_job(lab):
    lab = lab()
    lab.algorithm("ddp", "python ddp.py", {"ddp.py": DISTRIBUTED}, "fail: 1\n")
    job = lab.jobs.submit(
        JobRequest(project="p", algorithm="ddp", resources={"workers": 2, "cpu": 1, "memory": 256})
    )
    job = lab.wait(job.id)
    assert (job.state, job.exit_code) == ("failed", 1)
    assert job.reason == "worker 1 exited with code 1: worker 1: out of patience"
    with lab.platform.session() as session:
        assert session.scalar(select(func.count()).select_from(Reservation)) == 0


RAW_EVENTS = """\
import json, os, time
lines = [
    '{"type": "metric", "title": "loss", "x": NaN, "values": {"train": 1.0}}',
    '{"type": "metric", "title": "loss", "x": 1, "values": {"train": Infinity}}',
    '{"type": "result", "accuracy": NaN}',
    '{"type": "result", "deep": ' + "[" * 5000 + "]" * 5000 + "}",  # a RecursionError to json
    '{"type": "result", "deep": ' + "[" * 64 + "]" * 64 + "}",  # 65 levels: past the cap
    json.dumps({"type": "metric", "title": "t" * 300, "x": 0, "values": {"s" * 300: 2.0}}),
    '{"type": "metric", "title": "loss", "x": 2, "values": {"train": 0.5}}',
    '{"type": "done"}',
]
with open(os.environ["KPL_EVENTS_FILE"], "a") as out:
    out.write("\\n".join(lines) + "\\n")
"""


def test_events_any_database_can_store(lab):
    lab = lab()
    lab.algorithm("raw", "python raw.py", {"raw.py": RAW_EVENTS})
    job = lab.wait(lab.jobs.submit(JobRequest(project="p", algorithm="raw")).id)
    assert job.state == "succeeded", job.reason
    # JSON has no NaN or infinity (PostgreSQL refuses them), nor more than 64 levels: such events are invalid
    assert job.events_invalid == 5
    assert job.results == []
    metrics = lab.jobs.metrics("p", job.id)
    assert metrics["loss"]["train"] == [(2.0, 0.5)]
    assert metrics["t" * 200]["s" * 200] == [(0.0, 2.0)]  # names are cut to the columns' 200 characters


def test_each_submit_runs_the_version_its_algorithm_ref_names_now(lab):
    """A version found by one submit is checked again by the next: a new version, a pinned one, a deleted one."""
    lab = lab()
    first = lab.algorithm("v", "python -c 'print(1)'")

    def submit(ref: str) -> Job:
        job = lab.jobs.submit(JobRequest(project="p", algorithm=ref))
        assert lab.wait(job.id).state == "succeeded"
        return job

    assert submit("v").algorithm_ref == first.ref
    assert submit("v").algorithm_ref == first.ref  # from the kept version
    folder = lab.tmp_path / "src-2" / "v"
    folder.mkdir(parents=True)
    (folder / "environment.yml").write_text(environment("python -c 'print(2)'"))
    (folder / "parameter.yml").write_text("x: 2\n")
    second = lab.platform.catalog.add_algorithm("p", folder)
    latest = submit("v")
    assert (latest.algorithm_ref, latest.parameters) == (second.ref, {"x": 2})
    assert submit(first.ref).algorithm_ref == first.ref
    assert submit(first.ref).algorithm_ref == first.ref
    assert submit(f"v:{second.version[:8]}").algorithm_ref == second.ref  # a hash prefix
    lab.platform.catalog.delete_algorithm("p", second.ref)
    assert submit("v").algorithm_ref == first.ref
    lab.platform.catalog.delete_algorithm("p", first.ref)
    with pytest.raises(NotFound):
        lab.jobs.submit(JobRequest(project="p", algorithm="v"))
    with pytest.raises(NotFound):
        lab.jobs.submit(JobRequest(project="p", algorithm=first.ref))
