"""Predictions from code: `Client.predict` and `%kpl_predict` against a deployment on a live server."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from traitlets.config import Config

from kpl_lab.errors import BadRequest, NotFound

from .conftest import _png, _zip

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
import os
from kpl_helper import deploy, io

weights = open(os.path.join(io.get_input_path(key="model"), "weights.txt")).read()


def predict(data, content_type):
    if content_type != "image/png":
        raise deploy.BadInput(f"expected a PNG, got {content_type}")
    return deploy.ClassificationResponse.dumps(1, 1, 1, int(weights), "steps")


deploy.serve(predict)
"""


@pytest.fixture
def deployed(kpl_server, kpl_data, wait_job_end, tmp_path):
    """Deploy the model of a toy train job with a deploy-only algorithm; yield the client."""
    client = kpl_server.client()
    client.upload_algorithm(
        _zip(tmp_path / "server.zip", {"server/environment.yml": SERVER_ENV, "server/serve.py": SERVE}),
        name="server",
    )
    job = wait_job_end(client, client.submit("toy", inputs={"data": "shapes"})["id"])
    model = job["outputs"]["model"]["registered"].removeprefix("model:")
    client.deploy("pets", model, algorithm="server")
    deadline = time.monotonic() + 120
    while client.deployment("pets")["state"] != "ready":
        assert time.monotonic() < deadline, client.deployment("pets")
        time.sleep(0.2)
    yield client, model
    client.delete_deployment("pets")


def test_client_predict_bytes_and_files(deployed, tmp_path):
    client, model = deployed
    answer = client.predict("pets", _png((1, 2, 3)), "image/png")
    assert answer == {
        "type": "classification",
        "height": 1,
        "width": 1,
        "depth": 1,
        "class_id": 3,  # the toy's weights.txt: its steps
        "class_name": "steps",
        "error": "",
        "model_version": model,
    }
    image = tmp_path / "square.png"
    image.write_bytes(_png((9, 9, 9)))
    assert client.predict("pets", image)["model_version"] == model
    with pytest.raises(BadRequest, match="expected a PNG, got text/plain"):
        client.predict("pets", b"hello", "text/plain")
    other = type(client)(client.url, client.token, project="other")
    with pytest.raises(NotFound, match="deployment 'pets' not found in project 'other'"):
        other.predict("pets", image)
    # a browser form: the multipart file and its content type go to the model
    boundary = "kpl-boundary"
    form = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.png"\r\n'
            "Content-Type: image/png\r\n\r\n"
        ).encode()
        + _png((4, 5, 6))
        + f"\r\n--{boundary}--\r\n".encode()
    )
    request = urllib.request.Request(
        client.url + "deployments/pets/predict",
        form,
        {
            "Content-Type": f"multipart/form-data; boundary={boundary}",
            "Authorization": f"token {client.token}",
        },
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.headers["X-KPL-Model-Version"] == model
        assert json.loads(answer.read())["class_name"] == "steps"
    assert [d["name"] for d in client.deployments()] == ["pets"]
    assert client.deployment("pets")["metrics"][model]["requests"] == 4
    # the gateway's history: written by the server's background round, the bad input an error
    deadline = time.monotonic() + 60
    while (totals := client.deployment_metrics("pets")["totals"]).get(model, {}).get("requests") != 4:
        assert time.monotonic() < deadline, totals
        time.sleep(0.2)
    assert totals[model]["errors"] == 1


def test_kpl_predict_magic(deployed, kpl_server, tmp_path, monkeypatch):
    client, model = deployed
    monkeypatch.setenv("KPL_API_URL", kpl_server.url + "kpl/api/")
    monkeypatch.setenv("KPL_API_TOKEN", kpl_server.token)
    config = Config()
    config.HistoryManager.enabled = False
    shell = InteractiveShell.instance(config=config)
    try:
        shell.run_line_magic("load_ext", "kpl_lab")
        image = tmp_path / "square.png"
        image.write_bytes(_png((9, 9, 9)))
        answer = shell.run_line_magic("kpl_predict", f"pets {image}")
        assert answer["model_version"] == model and answer["class_name"] == "steps"
        note = tmp_path / "note.txt"
        note.write_text("hello")
        with capture_output() as captured:
            assert shell.run_line_magic("kpl_predict", f"pets {note}") is None
        assert "%kpl_predict: expected a PNG, got text/plain" in captured.stderr
    finally:
        InteractiveShell.clear_instance()
