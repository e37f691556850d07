"""Algorithms, jobs, models and devices over HTTP, with real jobs run by the local executor."""

import hashlib
import json

from sqlalchemy import select

from kpl_lab.catalog.jobs import Job

from .conftest import zip_bytes

TRAIN = """\
import os
import kpl_helper as kh
from kpl_helper import metric, progress

p = kh.get_parameter(default={"epochs": 3, "lr": 0.1})
figure = metric.MetricFigure("loss", y1_name="train", y2_name="val")
for epoch in range(p.epochs):
    figure.push_metric(x=epoch, y1=1.0 / (epoch + 1), y2=2.0 / (epoch + 1))
    progress.send_progress((epoch + 1) / p.epochs)
    print("epoch", epoch, "lr", p.lr, "\u00e9t\u00e9", flush=True)
out = kh.io.get_output_path("model", "/nonexistent")
with open(os.path.join(out, "weights.bin"), "w") as f:
    f.write("epochs=%d" % p.epochs)
kh.done()
"""

WAIT = """\
import os, time
print("waiting", flush=True)
while not os.path.exists(os.environ["RELEASE"] if "RELEASE" in os.environ else "RELEASE_FILE"):
    time.sleep(0.05)
"""


def environment(cmd: str, cpu: float = 1, gpu: int = 0, outputs=()) -> str:
    lines = ["version: 1", "image:", "  runs: []", "train:", "  resource:", "    limits:"]
    lines += [f"      cpu: {cpu}", "      memory: 256"] + ([f"      gpu: {gpu}"] if gpu else [])
    if outputs:
        lines.append("  outputs:")
        lines += [f"    - key: {key}\n      name: {key}" for key in outputs]
    lines.append(f"  cmd: {cmd}")
    return "\n".join(lines) + "\n"


def algorithm_zip(
    name: str, script: str, parameters: str = "epochs: 3  # passes over the data\nlr: 0.1\n", **env
):
    return zip_bytes(
        {
            f"{name}/environment.yml": environment("python main.py", **env).encode(),
            f"{name}/parameter.yml": parameters.encode(),
            f"{name}/main.py": script.encode(),
        }
    )


async def add_algorithm(api, name: str, script: str, **env) -> dict:
    code, version = await api.upload("algorithms", algorithm_zip(name, script, **env), filename=f"{name}.zip")
    assert code == 201, version
    return version


async def test_algorithm_upload_show_and_delete(api):
    version = await add_algorithm(api, "trainer", TRAIN, outputs=["model"])
    assert (version["name"], version["functions"], version["parameters"]) == (
        "trainer",
        ["train"],
        {"epochs": 3, "lr": 0.1},
    )
    code, listed = await api.get("algorithms")
    assert code == 200 and [a["name"] for a in listed["algorithms"]] == ["trainer"]
    code, shown = await api.get("algorithms/trainer")
    assert code == 200 and shown["versions"][0]["ref"] == version["ref"]
    code, detail = await api.get(f"algorithms/trainer/versions/{version['version']}")
    assert code == 200, detail
    train = detail["function_specs"]["train"]
    assert train["cmd"] == "python main.py" and train["outputs"] == [{"key": "model", "name": "model"}]
    assert train["resource"]["limits"]["cpu"] == 1 and train["resource"]["workers"] == 1
    assert detail["parameter_schema"]["properties"]["epochs"]["type"] == "integer"
    assert detail["parameter_descriptions"]["epochs"] == "passes over the data"
    assert detail["image"]["used"] is False  # local jobs: no image, whatever environment.yml names
    code, deleted = await api.delete(f"algorithms/trainer/versions/{version['version']}")
    assert (code, deleted["deleted"]) == (200, [version["ref"]])
    assert (await api.get("algorithms/trainer"))[0] == 404


async def test_bad_algorithm_uploads(api):
    code, body = await api.upload("algorithms", zip_bytes({"x/readme.txt": b"hi"}), name="x")
    assert (code, body["field"]) == (400, "body") and "environment.yml" in body["message"]
    code, body = await api.upload("algorithms", b"not an archive", name="x")
    assert (code, body["field"]) == (400, "body")
    code, body = await api.upload("algorithms", algorithm_zip("a", TRAIN), name="bad name")
    assert (code, body["field"]) == (400, "name")


async def test_job_runs_to_success_with_logs_metrics_progress_and_model(api):
    await add_algorithm(api, "trainer", TRAIN, outputs=["model"])
    code, job = await api.post("jobs", {"algorithm": "trainer", "parameters": {"epochs": 4}})
    assert code == 201, job
    assert job["state"] in ("queued", "running") and job["parameters"]["epochs"] == 4
    job = await api.wait_job(job["id"])
    assert (job["state"], job["exit_code"]) == ("succeeded", 0), job

    code, logs = await api.get(f"jobs/{job['id']}/logs")
    assert code == 200 and logs["done"] and logs["state"] == "succeeded"
    assert "epoch 3 lr 0.1 \u00e9t\u00e9" in logs["text"] and logs["next_offset"] == logs["size"]
    code, part = await api.get(f"jobs/{job['id']}/logs", offset=2, limit=5)
    assert part["text"] == logs["text"].encode()[2:7].decode() and part["next_offset"] == 7

    code, metrics = await api.get(f"jobs/{job['id']}/metrics")
    assert code == 200 and metrics["figures"]["loss"]["train"] == [[0, 1.0], [1, 0.5], [2, 1 / 3], [3, 0.25]]
    assert metrics["labels"]["loss"] == {"x_name": "step", "y1_name": "train", "y2_name": "val"}
    code, metrics = await api.get(f"jobs/{job['id']}/metrics", max_points=2)
    assert len(metrics["figures"]["loss"]["train"]) <= 2
    assert (await api.get(f"jobs/{job['id']}/progress"))[1] == {
        "state": "succeeded",
        "progress": 1.0,
        "eta_seconds": 0.0,
        "queue": None,
    }

    registered = job["outputs"]["model"]["registered"]
    assert registered.startswith("model:trainer-model:")  # <algorithm>-<output key>
    code, models = await api.get("models")
    assert code == 200 and [m["name"] for m in models["models"]] == ["trainer-model"]
    version = registered.rsplit(":", 1)[1]
    code, model = await api.get(f"models/trainer-model/versions/{version}")
    assert code == 200 and model["files"] == ["weights.bin"] and model["lineage"]["job_id"] == job["id"]
    assert (await api.get("models/trainer-model"))[1]["versions"][0]["version"] == version

    code, listed = await api.get("jobs", state="succeeded")
    assert [j["id"] for j in listed["jobs"]] == [job["id"]]
    assert (await api.get("jobs", state="running"))[1] == {"jobs": []}
    assert (await api.get("jobs", state="done"))[0] == 400

    code, copy = await api.post(f"jobs/{job['id']}/copy", {"parameters": {"epochs": 1}})
    assert code == 201 and copy["copied_from"] == job["id"] and copy["parameters"]["epochs"] == 1
    code, rerun = await api.post(f"jobs/{job['id']}/rerun")
    assert code == 201 and rerun["parameters"]["epochs"] == 4
    for other in (copy, rerun):
        assert (await api.wait_job(other["id"]))["state"] == "succeeded"
    code, body = await api.delete(f"models/trainer-model/versions/{version}")
    assert code == 200


async def test_job_errors_name_the_field(api):
    await add_algorithm(api, "trainer", TRAIN)
    bad_json = await api.raw("POST", "jobs", b"{not json")
    assert bad_json.code == 400 and json.loads(bad_json.body)["field"] == "body"
    cases = [
        ({"algorithm": "nope"}, 404, None),
        ({"algorithm": "trainer", "parameters": {"epochs": "many"}}, 400, "parameters.epochs"),
        ({"algorithm": "trainer", "function": "infer"}, 400, "function"),
        ({"algorithm": "trainer", "inputs": {"data": "pets"}}, 400, "inputs.data"),
        ({"algorithm": "trainer", "resources": {"cpu": 64}}, 400, "resources.cpu"),
        ({"algorithm": "trainer", "resources": {"gpu": 2}}, 400, "resources.gpu"),
        ({"algorithm": "trainer", "resources": {"cpu": -1}}, 400, "resources.cpu"),
        ({"algorithm": "trainer", "colour": "red"}, 400, "colour"),
        ({"algorithm": "trainer", "project": "other"}, 400, "project"),
        ({}, 400, "algorithm"),
        ([1, 2], 400, "body"),
    ]
    for body, status, field in cases:
        code, error = await api.post("jobs", body)
        assert (code, error["field"]) == (status, field), (body, error)
        assert [e["field"] for e in error["errors"]][:1] == ([field] if field else []), error


async def test_a_refused_job_lists_every_field_at_fault(api):
    await add_algorithm(api, "trainer", TRAIN)
    code, error = await api.post(
        "jobs", {"algorithm": "trainer", "resources": {"cpu": -1, "memory": 0}, "colour": "red"}
    )
    assert code == 400 and error["error"] == "BadRequest", error
    assert {e["field"] for e in error["errors"]} == {"resources.cpu", "resources.memory", "colour"}
    code, error = await api.post(
        "jobs", {"algorithm": "trainer", "parameters": {"epochs": "many", "lr": "fast"}}
    )
    assert code == 400 and error["field"] == "parameters.epochs", error
    assert [e["field"] for e in error["errors"]] == ["parameters.epochs", "parameters.lr"]
    assert all(e["message"] for e in error["errors"])
    code, error = await api.post(
        "jobs", {"algorithm": "trainer", "inputs": {"data": "pets"}, "parameters": {"epochs": "many"}}
    )
    assert code == 400 and [e["field"] for e in error["errors"]] == ["inputs.data", "parameters.epochs"]
    assert (await api.get("jobs/0000000000"))[0] == 404
    assert (await api.post("jobs/0000000000/stop"))[0] == 404


async def test_stop_follow_logs_devices_and_isolation(api, tmp_path):
    release = tmp_path / "release"
    await add_algorithm(api, "waiter", WAIT.replace("RELEASE_FILE", str(release)), gpu=1)
    code, job = await api.post("jobs", {"algorithm": "waiter"})
    assert code == 201, job
    job = await api.wait_job(job["id"], states=("running",))
    assert job["assigned_devices"] == {"gpu": [0]}

    code, devices = await api.get("devices")
    assert code == 200 and devices["capacity"]["devices"] == {"gpu": [0]}
    assert devices["devices"] == [
        {"kind": "gpu", "index": 0, "name": "Test GPU", "memory_mb": 1024, "used_by": f"job:{job['id']}"}
    ]
    assert devices["project_used"]["devices"] == {"gpu": [0]}
    assert (await api.get("devices", project="other"))[1]["devices"][0]["used_by"] == "other project"

    code, queued = await api.post("jobs", {"algorithm": "waiter"})
    assert code == 201 and queued["state"] == "queued"  # the only GPU is held
    code, stopped = await api.post(f"jobs/{queued['id']}/stop")
    assert (code, stopped["state"]) == (200, "stopped")
    assert (await api.post(f"jobs/{queued['id']}/stop"))[0] == 409

    assert (await api.get(f"jobs/{job['id']}", project="other"))[0] == 404
    assert (await api.post(f"jobs/{job['id']}/stop", project="other"))[0] == 404
    assert (await api.get("jobs", project="other"))[1] == {"jobs": []}

    code, chunk = await api.get(f"jobs/{job['id']}/logs", wait=5)
    assert chunk["text"].startswith("waiting") and not chunk["done"]
    code, chunk = await api.get(f"jobs/{job['id']}/logs", offset=chunk["next_offset"], wait=1)
    assert (chunk["text"], chunk["done"]) == ("", False)  # waited, nothing new

    code, stopped = await api.post(f"jobs/{job['id']}/stop")
    assert code == 200
    job = await api.wait_job(job["id"])
    assert job["state"] == "stopped"
    followed = await api.raw("GET", f"jobs/{job['id']}/logs", follow=1)
    assert followed.code == 200 and followed.headers["Content-Type"].startswith("text/plain")
    assert followed.body.decode().startswith("waiting\n")
    assert (await api.post(f"jobs/{job['id']}/resume"))[0] == 400  # it registered no model


async def test_follow_streams_until_the_job_ends(api, tmp_path):
    release = tmp_path / "release"
    script = WAIT.replace("RELEASE_FILE", str(release)) + "print('done', flush=True)\n"
    await add_algorithm(api, "waiter", script)
    _, job = await api.post("jobs", {"algorithm": "waiter"})
    await api.wait_job(job["id"], states=("running",))
    chunks = []

    def on_chunk(data: bytes) -> None:
        chunks.append(data)
        if b"waiting" in b"".join(chunks):
            release.touch()  # the stream is live: let the job finish while it is followed

    response = await api.raw("GET", f"jobs/{job['id']}/logs", follow=1, streaming_callback=on_chunk)
    assert response.code == 200 and response.headers["Content-Type"].startswith("text/plain")
    assert b"".join(chunks).decode() == "waiting\ndone\n"
    assert (await api.wait_job(job["id"]))["state"] == "succeeded"


async def test_usage_and_events_pushed_with_the_job_token(api, tmp_path, jp_serverapp):
    release = tmp_path / "release"
    await add_algorithm(api, "waiter", WAIT.replace("RELEASE_FILE", str(release)))
    _, job = await api.post("jobs", {"algorithm": "waiter"})
    await api.wait_job(job["id"], states=("running",))
    code, usage = await api.get(f"jobs/{job['id']}/usage")
    assert code == 200 and isinstance(usage, dict)
    assert (await api.get(f"jobs/{job['id']}/usage", project="other"))[0] == 404

    events = [{"type": "metric", "title": "acc", "x": 1, "values": {"acc": 0.5}}]
    path = f"jobs/{job['id']}/events"
    for headers, status in (({}, 403), ({"Authorization": "token wrong"}, 403)):
        response = await api.raw("POST", path, json.dumps(events).encode(), headers=headers)
        assert response.code == status, response.body
    # the executor that gives a job a token keeps its SHA-256 in the handle (Kubernetes)
    app = next(e for e in jp_serverapp.extension_manager.extension_apps["kpl_lab"])
    with app.platform.session(immediate=True) as session:  # read then write, beside supervisors that write
        row = session.scalar(select(Job).where(Job.id == job["id"]))
        row.handle = {**row.handle, "token_sha256": hashlib.sha256(b"secret-token").hexdigest()}
    headers = {"Authorization": "token secret-token"}
    response = await api.raw("POST", path, json.dumps(events).encode(), headers=headers)
    assert response.code == 200 and json.loads(response.body) == {"accepted": 1}
    assert (await api.get(f"jobs/{job['id']}/metrics"))[1]["figures"]["acc"]["acc"] == [[1.0, 0.5]]
    response = await api.raw("POST", path, b'{"type": "metric"}', headers=headers)
    assert response.code == 400
    release.touch()
    assert (await api.wait_job(job["id"]))["state"] == "succeeded"


async def test_a_queued_job_says_why_and_an_impossible_one_is_refused(api, tmp_path):
    release = tmp_path / "release"
    await add_algorithm(api, "waiter", WAIT.replace("RELEASE_FILE", str(release)), gpu=1)
    code, first = await api.post("jobs", {"algorithm": "waiter"})
    assert code == 201 and first["queue"] is None
    code, second = await api.post("jobs", {"algorithm": "waiter"})
    assert code == 201 and second["state"] == "queued"
    message = f"waits for 1 GPU (0 free of 1); held by job {first['id']}; 1st of 1 in the queue"
    assert second["queue"]["message"] == message
    assert (second["queue"]["limit"], second["queue"]["waits_for"]) == ("machine", ["gpu"])
    assert second["queue"]["held_by"] == [
        {
            "kind": "job",
            "id": first["id"],
            "user": None,
            "project": "default",
            "cpu": 1,
            "memory": 256,
            "devices": {"gpu": 1},
        }
    ]
    assert (await api.get(f"jobs/{second['id']}"))[1]["queue"]["message"] == message
    listed = {job["id"]: job["queue"] for job in (await api.get("jobs"))[1]["jobs"]}
    assert listed[second["id"]]["message"] == message and listed[first["id"]] is None
    assert (await api.get(f"jobs/{second['id']}/progress"))[1]["queue"]["message"] == message

    code, error = await api.post("jobs", {"algorithm": "waiter", "resources": {"cpu": 4}})
    assert code == 400
    assert (error["field"], error["message"]) == ("resources.cpu", "asks 4 CPUs; this machine has 2")
    release.touch()
    assert (await api.wait_job(second["id"]))["state"] == "succeeded"
    assert (await api.get(f"jobs/{second['id']}"))[1]["queue"] is None


def test_a_log_that_is_a_link_is_refused_not_read(tmp_path):
    """A job's run folder is its user's: the server, maybe root, reads no link she put in place of a log."""
    import pytest

    from kpl_lab.errors import Forbidden
    from kpl_lab.server_ext.handlers.jobs import read_log

    secret = tmp_path / "secrets.json"
    secret.write_text('{"cookie_secret": "x"}')
    run_dir = tmp_path / "run"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "output.log").write_text("line\n")
    assert read_log(run_dir, run_dir / "output.log", 0, 100) == (b"line\n", 5)
    (run_dir / "output.log").unlink()
    (run_dir / "output.log").symlink_to(secret)
    (run_dir / "logs" / "worker-1.log").symlink_to(secret)
    for path in (run_dir / "output.log", run_dir / "logs" / "worker-1.log"):
        with pytest.raises(Forbidden, match="symbolic link") as refused:
            read_log(run_dir, path, 0, 100)
        assert str(tmp_path) not in str(refused.value)
