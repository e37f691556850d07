"""A platform with room for replicas and a toy algorithm whose deploy answers with its model's label."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from traitlets.config import Config

from kpl_lab.platform import Platform
from kpl_lab.serving import address

ENVIRONMENT = """\
version: 1
image:
  runs: []
deploy:
  resource:
    limits:
      cpu: 0.5
      memory: 256
  inputs:
    - key: model
      name: model
  cmd: python serve.py
"""

# the model is a file `label.txt` (and optionally `hold.txt`, the path of a file that keeps the replica from
# serving while it exists); `crash` makes the server exit, anything not starting with `img` is bad input
SERVE = """\
import os
import time
import kpl_helper
from kpl_helper import deploy

model = kpl_helper.io.get_input_path(key="model", default="./model")
label = open(os.path.join(model, "label.txt")).read().strip()
if label == "broken":
    raise SystemExit("cannot load model: broken")
print("loaded", label, flush=True)
if os.path.exists(os.path.join(model, "hold.txt")):
    gate = open(os.path.join(model, "hold.txt")).read().strip()
    while os.path.exists(gate):
        time.sleep(0.05)


def predict(data, content_type):
    if data == b"crash":
        os._exit(3)
    if not data.startswith(b"img"):
        raise deploy.BadInput(f"not an image ({content_type})")
    return deploy.ClassificationResponse.dumps(1, len(data), 1, 0, label)


deploy.serve(predict)
"""


@pytest.fixture
def serving_platform(tmp_path, monkeypatch):
    """Return a platform whose ledger holds many replicas, with fast restarts; its deployments end with it."""
    home = tmp_path / "kpl-home"
    monkeypatch.setenv("KPL_LAB_HOME", str(home))
    config = Config(
        {
            "Ledger": {"cpu": 16.0, "memory": 65536},
            "DeploymentService": {"backoff_seconds": 0.2, "grace_seconds": 2.0, "drain_seconds": 0.8},
        }
    )
    platform = Platform(home=str(home), config=config)
    yield platform
    for project in platform.catalog.list_projects():
        for deployment in platform.deployments.list(project.name):
            with contextlib.suppress(Exception):
                platform.deployments.delete(project.name, deployment.name)
    platform.close()


def toy_algorithm(folder: Path) -> Path:
    """Write the toy serving algorithm (environment.yml, serve.py) into a new folder; return it."""
    folder.mkdir()
    (folder / "environment.yml").write_text(ENVIRONMENT)
    (folder / "serve.py").write_text(SERVE)
    return folder


def port_algorithm(folder: Path) -> Path:
    """Write the toy algorithm with a server of its own on the port it is given, not the socket; return it."""
    toy_algorithm(folder)
    serve = (folder / "serve.py").read_text()
    (folder / "serve.py").write_text(
        serve.replace(
            "deploy.serve(predict)", "deploy.serve(predict, port=int(os.environ['KPL_DEPLOY_PORT']))"
        )
    )
    return folder


@pytest.fixture
def toy(serving_platform, tmp_path):
    """Return a function adding the toy algorithm and a model labelled LABEL to a project; it returns the model ref."""

    def add(label: str, project: str = "default", model: str = "toy-model", hold: Path | None = None) -> str:
        algorithm = tmp_path / "toy-serve"
        if not algorithm.is_dir():
            toy_algorithm(algorithm)
        serving_platform.catalog.add_algorithm(project, algorithm, name="toy-serve")
        folder = tmp_path / "models" / label
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "label.txt").write_text(label)
        if hold is not None:  # the replica starts but is not ready until the test deletes `hold`
            hold.touch()
            (folder / "hold.txt").write_text(str(hold))
        return serving_platform.catalog.add_model(project, model, folder).ref

    return add


def ready_url(platform: Platform, project: str, name: str) -> str:
    """Return the address of the first ready replica of a deployment (unix:PATH or http://HOST:PORT)."""
    routing = platform.deployments.routing(project, name)
    return next(iter(routing.ready.values()))[0]


def post(url: str, body: bytes) -> tuple[int, dict]:
    """POST an image body to a replica's /predict; return its status and JSON answer."""
    status, answer = address.request(url, "POST", "/predict", 30, body, {"Content-Type": "image/png"})
    return status, json.loads(answer)
