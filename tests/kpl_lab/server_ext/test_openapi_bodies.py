"""Every route answers bodies that docs/openapi.yaml describes: each one is called on a live server.

The checked client validates every JSON answer, success or error, against the schema the
document gives that path, method and status, and notes which operations it saw.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator
from sqlalchemy import select

from kpl_lab.catalog.jobs import Job

from .conftest import Api, imagefolder_zip, zip_bytes
from .test_jobs_api import TRAIN, WAIT, algorithm_zip

SPEC = yaml.safe_load((Path(__file__).parents[3] / "docs" / "openapi.yaml").read_text())


def _matcher(path: str) -> re.Pattern:
    return re.compile("^/kpl/api" + re.sub(r"\{\w+\}", "[^/]+", path) + "/?$")


PATHS = [(_matcher(path), path) for path in SPEC["paths"]]
SERVER_ENV = b"""\
version: 1
deploy:
  resource:
    limits:
      cpu: 0.1
      memory: 128
  inputs:
    - key: model
      name: model
  cmd: python serve.py
"""
SERVE = b"""\
from kpl_helper import deploy


def predict(data, content_type):
    if data == b"fail":
        raise RuntimeError("the model failed")
    if not data.startswith(b"img"):
        raise deploy.BadInput("not an image")
    return deploy.ClassificationResponse.dumps(1, 1, 1, 0, "one")


deploy.serve(predict)
"""


def answer_schema(path: str, method: str, status: int, media: str) -> dict:
    """Return the schema the document gives an answer, refs to shared responses followed."""
    responses = SPEC["paths"][path][method]["responses"]
    response = responses.get(str(status)) or responses["default"]
    if "$ref" in response:
        response = SPEC["components"]["responses"][response["$ref"].rsplit("/", 1)[1]]
    content = response.get("content") or {}
    media = media if media in content or media == "application/json" else "*/*"
    assert media in content, f"{method.upper()} {path} {status}: {media} is not documented"
    return content[media]["schema"]


class CheckedApi(Api):
    """An Api that validates every answer against the document and records the operations seen."""

    def __init__(self, fetch) -> None:
        super().__init__(fetch)
        self.seen: set[tuple[str, str, int]] = set()

    async def raw(self, method: str, path: str, body=None, headers=None, streaming_callback=None, **params):
        response = await super().raw(method, path, body, headers, streaming_callback, **params)
        url = "/kpl/api/" + path.strip("/")
        documented = next((p for regex, p in PATHS if regex.match(url)), None)
        assert documented is not None, f"{url} is not in docs/openapi.yaml"
        media = response.headers.get("Content-Type", "").split(";")[0].strip()
        schema = answer_schema(documented, method.lower(), response.code, media)
        if media == "application/json":
            validator = Draft202012Validator({**schema, "components": SPEC["components"]})
            errors = sorted(validator.iter_errors(json.loads(response.body)), key=str)
            assert not errors, (
                f"{method} {url} {response.code}: {errors[0].message} at {list(errors[0].path)}"
            )
        self.seen.add((method.lower(), documented, response.code))
        return response


async def wait_run(api, run_id: str) -> dict:
    """Poll a pipeline run until it has ended; return it."""
    for _ in range(1200):
        code, run = await api.get(f"pipelines/runs/{run_id}")
        assert code == 200, run
        if run["state"] != "running":
            return run
        await asyncio.sleep(0.1)
    raise AssertionError(f"pipeline run {run_id} still running")


@pytest.fixture
def checked(jp_fetch) -> CheckedApi:
    return CheckedApi(jp_fetch)


async def test_every_route_answers_its_documented_schema(checked, jp_serverapp, tmp_path):
    api = checked
    assert (await api.get("version"))[0] == 200

    # datasets
    code, added = await api.upload("datasets", imagefolder_zip(), name="pets", format="imagefolder")
    assert code == 201, added
    version = added["version"]
    assert (await api.get("datasets", q="pet"))[0] == 200
    assert (await api.get("datasets/pets"))[0] == 200
    assert (await api.get(f"datasets/pets/versions/{version}"))[0] == 200
    code, page = await api.get(f"datasets/pets/versions/{version}/records", limit=2)
    assert code == 200 and page["records"], page
    image = await api.raw("GET", f"datasets/pets/versions/{version}/records/0/fields/content")
    assert image.code == 200
    assert (await api.raw("GET", f"datasets/pets/versions/{version}/records/0/fields/class_name")).code == 200
    assert (await api.get(f"datasets/pets/versions/{version}/stats"))[0] == 200
    assert (await api.get("imports"))[0] == 200

    # algorithms and a job that registers a model
    code, algorithm = await api.upload("algorithms", algorithm_zip("trainer", TRAIN, outputs=["model"]))
    assert code == 201, algorithm
    assert (await api.get("algorithms"))[0] == 200
    assert (await api.get("algorithms/trainer"))[0] == 200
    assert (await api.get(f"algorithms/trainer/versions/{algorithm['version']}"))[0] == 200
    code, job = await api.post("jobs", {"algorithm": "trainer", "parameters": {"epochs": 2}})
    assert code == 201, job
    job = await api.wait_job(job["id"])
    assert job["state"] == "succeeded", job
    for route in ("logs", "metrics", "progress", "usage"):
        assert (await api.get(f"jobs/{job['id']}/{route}"))[0] == 200, route
    assert (await api.raw("GET", f"jobs/{job['id']}/logs", follow=1)).code == 200
    assert (await api.get("jobs", state="succeeded"))[0] == 200
    assert (await api.post(f"jobs/{job['id']}/stop"))[0] == 409
    for route, body in (("rerun", None), ("copy", {"parameters": {"epochs": 1}})):
        code, other = await api.post(f"jobs/{job['id']}/{route}", body)
        assert code == 201, (route, other)
        await api.wait_job(other["id"])
    assert (await api.post(f"jobs/{job['id']}/resume", {}))[0] == 400  # no model input to resume from

    # comparisons and experiments (driven by the server's background rounds)
    code, comparison = await api.get("comparisons", ids=f"{job['id']},{other['id']}")
    assert code == 200 and comparison["differing_parameters"] == ["epochs"], comparison
    search = {
        "name": "tune",
        "algorithm": "trainer",
        "space": {"epochs": {"type": "int", "low": 1, "high": 2}},
        "objective": {"metric": "loss/val", "direction": "minimize"},
        "sampler": {"name": "grid"},
    }
    code, refused = await api.post("experiments", {**search, "space": {"nope": search["space"]["epochs"]}})
    assert (code, refused["field"]) == (400, "space.nope")
    code, experiment = await api.post("experiments", search)
    assert code == 201 and experiment["warnings"] == [], experiment
    assert (await api.get("experiments"))[0] == 200
    assert (await api.post("experiments/tune/stop"))[0] == 200
    assert (await api.post("experiments/tune/resume", {}))[0] == 200
    experiment = await api.wait_experiment("tune")
    assert experiment["state"] == "succeeded" and experiment["best_params"] == {"epochs": 2}, experiment
    for kind in ("history", "importance", "parallel"):
        assert (await api.get(f"experiments/tune/plots/{kind}"))[0] == 200, kind
    assert (await api.post("experiments/tune/stop"))[0] == 409

    # models
    model_version = job["outputs"]["model"]["registered"].rsplit(":", 1)[1]
    assert (await api.get("models"))[0] == 200
    assert (await api.get("models/trainer-model"))[0] == 200
    assert (await api.get(f"models/trainer-model/versions/{model_version}"))[0] == 200
    assert (await api.get(f"models/trainer-model/versions/{model_version}/structure"))[0] == 200
    download = await api.raw("GET", f"models/trainer-model/versions/{model_version}/download")
    assert download.code == 200 and download.body.startswith(b"PK")
    code, uploaded = await api.upload("models", b"weights", name="uploaded", filename="w.bin")
    assert code == 201 and uploaded["files"] == ["w.bin"], uploaded
    code, aliased = await api.call(
        "PUT", "models/trainer-model/aliases/production", {"version": model_version}
    )
    assert code == 200 and aliased["aliases"] == {"production": model_version}, aliased
    assert (await api.get("models/trainer-model/aliases/production"))[0] == 200
    assert (await api.delete("models/trainer-model/aliases/production"))[0] == 200
    assert (await api.get("models/trainer-model/aliases/production"))[0] == 404
    assert (await api.delete("models/uploaded"))[0] == 200

    # a running job: stop, events with its token, devices
    release = tmp_path / "release"
    await api.upload("algorithms", algorithm_zip("waiter", WAIT.replace("RELEASE_FILE", str(release)), gpu=1))
    code, waiting = await api.post("jobs", {"algorithm": "waiter"})
    waiting = await api.wait_job(waiting["id"], states=("running",))
    assert (await api.get(f"jobs/{waiting['id']}/usage"))[0] == 200
    assert (await api.get("devices"))[0] == 200
    # the rules: a quota and the notebook profiles, read and replaced
    assert (await api.call("PUT", "quota", {"cpu": 2, "gpu": 1}))[0] == 200
    assert (await api.get("quota"))[0] == 200
    assert (await api.call("PUT", "profiles", {"profiles": [{"slug": "small", "cpu": 0.5}]}))[0] == 200
    assert (await api.get("profiles"))[0] == 200
    app = next(e for e in jp_serverapp.extension_manager.extension_apps["kpl_lab"])
    with app.platform.session(immediate=True) as session:  # read then write, beside supervisors that write
        row = session.scalar(select(Job).where(Job.id == waiting["id"]))
        row.handle = {**row.handle, "token_sha256": hashlib.sha256(b"secret").hexdigest()}
    events = [{"type": "metric", "title": "acc", "x": 1, "values": {"acc": 0.5}}]
    response = await api.raw(
        "POST", f"jobs/{waiting['id']}/events", json.dumps(events).encode(), {"Authorization": "token secret"}
    )
    assert response.code == 200, response.body
    code, stopped = await api.post(f"jobs/{waiting['id']}/stop")
    assert code == 200, stopped
    await api.wait_job(waiting["id"])

    # pipelines: templates, validate, a run to its end and again from a node, a run stopped while its job waits
    assert (await api.get("pipelines/templates"))[0] == 200
    code, types = await api.get("pipelines/node-types")
    by_name = {t["name"]: t for t in types["node_types"]}
    assert code == 200 and by_name["left_join"]["inputs"] == ["left", "right"], types
    copy = (
        "version: 1\nname: pets-copy\nnodes:\n  raw: {type: dataset, dataset: pets}\n"
        "  kept: {type: select, input: raw, where: 'true'}\n  save: {type: save_dataset, input: kept, name: pets-copy}\n"
    )
    code, validation = await api.post("pipelines/validate", {"text": copy})
    assert code == 200 and validation["ok"], validation
    code, run = await api.post("pipelines/runs", {"text": copy})
    assert code == 201, run
    assert (await wait_run(api, run["id"]))["state"] == "succeeded"
    assert (await api.get("pipelines/runs"))[0] == 200
    code, again = await api.post(f"pipelines/runs/{run['id']}/rerun", {"from_node": "kept"})
    assert code == 201, again
    assert (await wait_run(api, again["id"]))["state"] == "succeeded"
    assert (await api.post(f"pipelines/runs/{run['id']}/stop"))[0] == 409
    code, records = await api.get(f"pipelines/runs/{run['id']}/nodes/kept/records", limit=2)
    assert code == 200 and len(records["records"]) == 2, records
    assert (await api.get(f"pipelines/runs/{run['id']}/nodes/nothing/records"))[0] == 404
    code, held = await api.post(
        "pipelines/runs", {"text": "version: 1\nname: hold\nnodes:\n  w: {type: train, algorithm: waiter}\n"}
    )
    assert code == 201, held
    code, stopping = await api.post(f"pipelines/runs/{held['id']}/stop")
    assert code == 200, stopping
    held = await wait_run(api, held["id"])
    assert held["state"] == "stopped", held
    if held["nodes"][0]["job_id"]:
        await api.wait_job(held["nodes"][0]["job_id"])
    assert (await api.post("pipelines/runs", {"text": copy.replace("dataset: pets", "dataset: cats")}))[
        0
    ] == 400
    # a deployment of the job's model, served by an algorithm with a deploy function
    code, server = await api.upload(
        "algorithms", zip_bytes({"environment.yml": SERVER_ENV, "serve.py": SERVE})
    )
    assert code == 201, server
    body = {"name": "api", "model": f"trainer-model:{model_version}", "algorithm": server["ref"]}
    code, created = await api.post("deployments", body)
    assert code == 201, created
    assert (await api.post("deployments", body))[0] == 409
    deployment = await api.wait_deployment("api")
    assert deployment["state"] == "ready", deployment
    response = await api.raw("POST", "deployments/api/predict", b"img", {"Content-Type": "image/png"})
    assert (
        response.code == 200 and response.headers["X-KPL-Model-Version"] == f"trainer-model:{model_version}"
    )
    assert (await api.raw("POST", "deployments/api/predict", b"text")).code == 400
    assert (await api.raw("POST", "deployments/api/predict", b"fail")).code == 502
    assert (await api.get("deployments"))[0] == 200
    assert (await api.get("deployments/api/logs", lines=5))[0] == 200
    code, shown = await api.get("deployments/api")
    assert code == 200 and shown["metrics"][f"trainer-model:{model_version}"]["requests"] == 3, shown
    # the gateway's counts reach the metrics history with the next background round
    version_ref = f"trainer-model:{model_version}"
    deadline = time.monotonic() + 60
    while True:
        code, metrics = await api.get("deployments/api/metrics", since="2020-01-01T00:00:00Z")
        assert code == 200, metrics
        if metrics["totals"].get(version_ref, {}).get("requests") == 3 or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    assert metrics["totals"][version_ref]["errors"] == 2 and metrics["interval_seconds"] == 10, metrics
    assert sum(p["requests"] for p in metrics["series"][version_ref]) == 3
    assert (await api.get("deployments/api/metrics", since="yesterday"))[1]["field"] == "since"
    assert (await api.get("deployments/api"))[1]["totals"][version_ref]["requests"] == 3
    code, key = await api.post("deployments/api/keys")
    assert code == 201 and key["key"].startswith(key["prefix"]), key
    assert (await api.get("deployments/api/keys"))[1]["keys"][0]["id"] == key["id"]
    assert (await api.delete(f"deployments/api/keys/{key['id']}"))[0] == 200
    (tmp_path / "second").mkdir()
    (tmp_path / "second" / "weights.txt").write_text("another model")
    canary = app.platform.catalog.add_model("default", "trainer-model", tmp_path / "second").ref
    assert (await api.post("deployments/api/promote"))[0] == 409  # no canary yet
    code, shown = await api.post(
        "deployments/api/canary", {"model": canary, "weight": 30, "algorithm": server["ref"]}
    )
    assert code == 200 and shown["canary_model_version"] == canary, shown
    await api.wait_deployment("api")
    code, shown = await api.post("deployments/api/promote")
    assert code == 200 and shown["model_version"] == canary, shown
    assert (await api.get("deployments/api", project="other"))[0] == 404
    served = canary.removeprefix("trainer-model:")
    assert (await api.delete(f"models/trainer-model/versions/{served}"))[
        0
    ] == 409  # the production version now
    assert (await api.delete("deployments/api"))[0] == 200
    assert (await api.raw("POST", "deployments/api/predict", b"img")).code == 404

    # annotation: a task on the dataset, a label saved, reviewed and kept in its history
    task = {
        "name": "pets-class",
        "dataset": f"pets:{version}",
        "kind": "image_class",
        "label_schema": {"classes": [{"name": "cat", "children": ["tabby"]}, {"name": "dog"}]},
    }
    code, created = await api.post("annotation/tasks", task)
    assert code == 201, created
    assert (await api.get("annotation/tasks"))[0] == 200
    assert (await api.get("annotation/tasks/pets-class"))[0] == 200
    assert (await api.call("PATCH", "annotation/tasks/pets-class", {"description": "pets"}))[0] == 200
    code, queue = await api.get("annotation/tasks/pets-class/queue", order="uncertainty", limit=2)
    assert code == 200 and queue["records"][0]["record"] == 0, queue
    assert (await api.get("annotation/tasks/pets-class/records/0"))[0] == 200
    code, label = await api.call(
        "PUT", "annotation/tasks/pets-class/records/0/label", {"value": {"class_name": "dog"}, "version": 0}
    )
    assert code == 200, label
    code, again = await api.call(
        "PUT", "annotation/tasks/pets-class/records/0/label", {"value": {"class_name": "cat"}, "version": 0}
    )
    assert (code, again["field"]) == (409, "version"), again
    code, reviewed = await api.post(
        "annotation/tasks/pets-class/records/0/review", {"decision": "accept", "version": label["version"]}
    )
    assert code == 200 and reviewed["state"] == "accepted", reviewed
    assert (await api.get("annotation/tasks/pets-class/records/0/history"))[0] == 200
    code, published = await api.post("annotation/tasks/pets-class/publish", {"dataset": "pets-labelled"})
    assert code == 201 and published["lineage"]["annotation_task"] == "pets-class", published
    assert (await api.get("annotation/tasks/pets-class/export", format="voc"))[0] == 400  # a class task
    boxes = {**task, "name": "pets-boxes", "kind": "boxes"}
    assert (await api.post("annotation/tasks", boxes))[0] == 201
    box = {"type": "box", "class_name": "dog", "xmin": 1, "ymin": 1, "xmax": 4, "ymax": 4}
    code, label = await api.call(
        "PUT", "annotation/tasks/pets-boxes/records/0/label", {"value": {"objects": [box]}, "version": 0}
    )
    assert code == 200, label
    exported = await api.raw("GET", "annotation/tasks/pets-boxes/export", format="voc", all=1)
    assert exported.code == 200 and exported.body.startswith(b"PK")
    assert exported.headers["Content-Type"] == "application/zip"
    code, imported = await api.upload("annotation/tasks/pets-boxes/import", exported.body, format="voc")
    assert code == 200 and imported["kept"] == 1, imported
    assert (await api.delete("annotation/tasks/pets-boxes"))[0] == 200
    assert (await api.get("annotation/tasks/pets-class", project="other"))[0] == 404
    assert (await api.delete("annotation/tasks/pets-class"))[0] == 200

    # errors answer the Error schema
    assert (await api.get("jobs/0000000000"))[0] == 404
    assert (await api.post("jobs", {"algorithm": "trainer", "parameters": {"epochs": "x"}}))[0] == 400
    assert (await api.get("datasets", project="nobody's"))[0] == 400

    # deletes last
    assert (await api.delete(f"models/trainer-model/versions/{model_version}"))[0] == 200
    assert (await api.delete("models/trainer-model"))[0] in (200, 404)
    assert (await api.delete(f"datasets/pets/versions/{version}"))[0] == 200
    assert (await api.upload("datasets", imagefolder_zip(), name="pets", format="imagefolder"))[0] == 201
    assert (await api.delete("datasets/pets"))[0] == 200
    assert (await api.delete(f"algorithms/trainer/versions/{algorithm['version']}"))[0] == 200
    assert (await api.delete("algorithms/waiter"))[0] == 200

    operations = {(m, p) for p, item in SPEC["paths"].items() for m in item}
    succeeded = {(m, p) for m, p, status in api.seen if status < 300}
    assert {(m, p) for m, p, _ in api.seen} == operations
    assert operations - succeeded == {("post", "/jobs/{job_id}/resume")}  # its Error body was checked
