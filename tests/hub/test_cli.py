"""`kpl-lab` in a hub notebook talks to the shared service as its user, in the user's project."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import requests

from kpl_lab.client import Client

from .conftest import Hub, wait_for

REPOSITORY = str(Path(__file__).resolve().parents[2])

ENVIRONMENT = """\
version: 1
image:
  runs: []
train:
  resource:
    limits:
      cpu: 1
      memory: 512
  inputs:
    - key: data
      name: data
  outputs:
    - key: model
      name: net
  cmd: python train.py
"""

TRAIN = """\
import os
import kpl_helper
from kpl_helper import io, metric, progress

steps = kpl_helper.get_parameter(default="./parameter.yml").steps
data = io.get_input_path(key="data", default="./data")
out = io.get_output_path(key="model", default="./out")
print("training on", sorted(os.listdir(data)), flush=True)
fig = metric.MetricFigure("training", y1_name="loss", y2_name="accuracy")
for step in range(steps):
    fig.push_metric(x=step, y1=1.0 / (step + 1), y2=step / steps)
    progress.send_progress((step + 1) / steps)
with open(os.path.join(out, "weights.txt"), "w") as f:
    f.write(str(steps))
kpl_helper.done()
"""


def _zip(path: Path, files: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, content in files.items():
            archive.writestr(name, content)
    return path


# infer and test read the model and the data; deploy serves the model's weights as its class name
JUDGE_ENVIRONMENT = "version: 1\nimage:\n  runs: []\n" + "".join(
    f"{function}:\n  resource:\n    limits:\n      cpu: 0.5\n      memory: 256\n  inputs:\n"
    f"    - key: model\n      name: model\n{data}  cmd: python {script}\n"
    for function, data, script in (
        ("infer", "    - key: data\n      name: data\n", "judge.py"),
        ("test", "    - key: data\n      name: data\n", "judge.py"),
        ("deploy", "", "serve.py"),
    )
)
JUDGE = """\
import os, kpl_helper as kh
from kpl_helper import result

steps = int(open(os.path.join(kh.io.get_input_path("model", "/x"), "weights.txt")).read())
print("judged", sorted(os.listdir(kh.io.get_input_path("data", "/x"))), flush=True)
result.send_scalar_result(accuracy=steps / 10)
kh.done()
"""
SERVE = """\
import os, kpl_helper
from kpl_helper import deploy

weights = open(os.path.join(kpl_helper.io.get_input_path(key="model", default="./m"), "weights.txt")).read()


def predict(data, content_type):
    return deploy.ClassificationResponse.dumps(1, len(data), 1, 0, "steps-" + weights)


deploy.serve(predict)
"""
PIPELINE = """\
version: 1
name: copy-notes
nodes:
  raw:  {type: dataset, dataset: notes}
  save: {type: save_dataset, input: raw, name: notes-copy}
"""


@dataclass
class Notebook:
    """`kpl-lab` run as ivan in his notebook's environment, with the toy algorithm, notes and two models."""

    run: Callable[..., tuple[int, str, str]]
    jobs: list[str]
    models: list[str]
    hub_url: str
    token: str  # the notebook's JUPYTERHUB_API_TOKEN


@pytest.fixture(scope="module")
def notebook(hub: Hub, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Notebook]:
    tmp_path = tmp_path_factory.mktemp("notebook")
    hub.add_project("labs", ["ivan"], {"cpu": 2, "memory": 4096, "notebooks": 1})
    hub.add_project("secret", ["sara"], {})
    hidden = _zip(tmp_path / "hidden.zip", {"notes.txt": b"not for ivan"})
    Client(hub.url, hub.user_token("sara")).upload_dataset(hidden, "hidden")
    notes = _zip(tmp_path / "notes.zip", {"a.txt": b"one", "b.txt": b"two"})
    Client(hub.url, hub.user_token("ivan")).upload_dataset(notes, "notes", description="two notes")
    assert hub.spawn("ivan").status_code in (201, 202)
    server = hub.wait_ready("ivan")
    env = psutil.Process(server["state"]["pid"]).environ()
    env.pop("KPL_API_URL", None)  # set in the server's own process only, after it started
    env["PYTHONPATH"] = REPOSITORY  # this tree's kpl_lab, as the notebook's kernel would import it

    def run(*args: str) -> tuple[int, str, str]:
        done = subprocess.run(
            [sys.executable, "-m", "kpl_lab.cli", *args],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        return done.returncode, done.stdout, done.stderr

    algorithm = tmp_path / "toy"
    algorithm.mkdir()
    (algorithm / "environment.yml").write_text(ENVIRONMENT)
    (algorithm / "train.py").write_text(TRAIN)
    (algorithm / "parameter.yml").write_text("steps: 3\n")
    status, out, err = run("algorithm", "add", str(algorithm))
    assert status == 0, err
    assert out.startswith("added algorithm toy:") and "in project labs" in out
    jobs, models = [], []
    for steps in ("3", "4"):
        status, out, err = run("job", "submit", "toy", "--input", "data=notes", "--param", f"steps={steps}")
        assert status == 0, err
        jobs.append(out.split()[2])
    for job_id in jobs:
        status, out, err = run("job", "logs", job_id, "--follow")  # until it ends
        assert status == 0, err
        shown = json.loads(run("job", "show", job_id, "--json")[1])
        assert shown["state"] == "succeeded", shown["reason"] + hub.log()[-3000:]
        models.append(shown["outputs"]["model"]["registered"].removeprefix("model:"))
    yield Notebook(run, jobs, models, hub.url, env["JUPYTERHUB_API_TOKEN"])
    hub.stop_server("ivan")


def test_the_cli_in_a_notebook_works_in_the_users_project_on_the_service(hub: Hub, notebook: Notebook):
    cli = notebook.run
    status, out, err = cli("dataset", "list")
    assert status == 0, err
    assert "notes" in out and "two notes" in out and "hidden" not in out
    assert [d["name"] for d in json.loads(cli("dataset", "list", "--json")[1])][0] == "notes"

    job_id = notebook.jobs[0]
    status, out, err = cli("job", "show", job_id)
    assert status == 0, err
    assert "state:       succeeded" in out and "inputs:      data=dataset:notes" in out
    assert "training" in out and "Traceback" not in out
    shown = json.loads(cli("job", "show", job_id, "--json")[1])
    assert shown["project"] == "labs"
    status, out, err = cli("model", "list")
    assert status == 0, err
    assert out.splitlines()[2].split()[0] == notebook.models[0].split(":")[0]
    assert "training on [" in cli("job", "logs", job_id)[1]

    # the service knows the notebook's user: another project is refused with a sentence
    status, out, err = cli("--project", "secret", "dataset", "list")
    assert status == 2 and out == ""
    assert err.startswith("kpl-lab: error: ") and "secret" in err and "Traceback" not in err


def test_job_compare_in_a_notebook(notebook: Notebook):
    status, out, err = notebook.run("job", "compare", *notebook.jobs)
    assert status == 0, err
    assert re.search(r"^\* steps\s+3\s+4$", out, re.M) and "* training/loss final" in out, out
    compared = json.loads(notebook.run("job", "compare", *notebook.jobs, "--json")[1])
    assert [job["id"] for job in compared["jobs"]] == notebook.jobs
    assert compared["differing_parameters"] == ["steps"]


def test_model_commands_in_a_notebook(notebook: Notebook, tmp_path: Path):
    cli = notebook.run
    name, version = notebook.models[0].split(":")
    status, out, err = cli("model", "alias", notebook.models[0], "production")
    assert status == 0, err
    assert out == f"model {name}@production -> {name}:{version}\n"
    status, out, err = cli("model", "show", f"{name}@production", "--structure")
    assert status == 0, err
    assert out.startswith(f"model {name}:{version}\n") and "weights.txt" in out

    judge = tmp_path / "judge"
    judge.mkdir()
    (judge / "environment.yml").write_text(JUDGE_ENVIRONMENT)
    (judge / "judge.py").write_text(JUDGE)
    (judge / "serve.py").write_text(SERVE)
    assert cli("algorithm", "add", str(judge))[0] == 0
    status, out, err = cli(
        "model", "infer", f"{name}@production", "notes", "--algorithm", "judge", "--follow"
    )
    assert status == 0, out + err
    assert f"({name}:{version} infers notes:" in out and " succeeded after " in out
    evaluate = ("model", "evaluate", "judge", "--data", "dataset:notes", "--follow")
    status, out, err = cli(*evaluate, "--model", f"{name}@production", "--model", notebook.models[1])
    assert status == 0, out + err
    assert re.search(r"^\* result accuracy\s+0.3\s+0.4$", out, re.M), out

    status, out, err = cli("model", "unalias", name, "production")
    assert status == 0, err
    assert out == f"removed model alias {name}@production (was {name}:{version})\n"
    (tmp_path / "weights.txt").write_text("7")
    status, out, err = cli("model", "add", name, str(tmp_path / "weights.txt"))
    assert status == 0, err
    assert out.startswith(f"added model {name}:") and "in project labs" in out


def test_a_pipeline_in_a_notebook(notebook: Notebook, tmp_path: Path):
    cli = notebook.run
    file = tmp_path / "copy.kpl-pipeline.yaml"
    file.write_text(PIPELINE)
    status, out, err = cli("pipeline", "validate", str(file))
    assert status == 0, err
    assert f"{file}: valid (2 nodes)" in out
    status, out, err = cli("pipeline", "run", str(file), "--wait")
    assert status == 0, out + err
    lines = out.splitlines()
    run_id = lines[0].removeprefix("pipeline run ")
    assert "save: succeeded" in lines and lines[-1] == f"pipeline run {run_id} succeeded"
    status, out, err = cli("pipeline", "runs")
    assert status == 0, err
    assert run_id in out and "copy-notes" in out
    status, out, err = cli("pipeline", "show", run_id)
    assert status == 0, err
    assert "save_dataset" in out and "notes-copy:" in out
    assert json.loads(cli("dataset", "show", "notes-copy", "--json")[1])["record_count"] == 2


def test_a_deployment_in_a_notebook(hub: Hub, notebook: Notebook, tmp_path: Path):
    cli = notebook.run
    if cli("algorithm", "show", "judge")[0] != 0:  # alone: the model test adds it
        judge = tmp_path / "judge"
        judge.mkdir()
        (judge / "environment.yml").write_text(JUDGE_ENVIRONMENT)
        (judge / "serve.py").write_text(SERVE)
        assert cli("algorithm", "add", str(judge))[0] == 0
    model = notebook.models[1]
    try:
        status, out, err = cli(
            "deployment", "create", "toys", "--model", model, "--algorithm", "judge", "--wait"
        )
        assert status == 0, err
        assert out == f"deployment toys: {model} on 1 replica(s), ready\n"
        (tmp_path / "img.png").write_bytes(b"img")
        status, out, err = cli("deployment", "predict", "toys", str(tmp_path / "img.png"))
        assert status == 0, err
        assert json.loads(out)["class_name"] == "steps-4" and json.loads(out)["model_version"] == model
        shown = json.loads(cli("deployment", "show", "toys", "--json")[1])
        assert shown["state"] == "ready" and shown["metrics"][model]["requests"] == 1
        status, out, err = cli("deployment", "list")
        assert status == 0, err
        assert out.splitlines()[2].split()[:3] == ["toys", "ready", model]
        # a caller outside JupyterLab with an API key: the service's predict of this deployment only
        status, out, err = cli("deployment", "key", "create", "toys")
        assert status == 0, err
        bearer = {"Authorization": f"Bearer {out.strip()}"}
        api = f"{notebook.hub_url}/services/kpl/api/"
        answer = requests.post(
            api + "deployments/toys/predict", data=b"img", headers={**bearer, "Content-Type": "image/png"}
        )
        assert answer.status_code == 200 and answer.json()["class_name"] == "steps-4", answer.text
        for method, path in (("GET", "deployments"), ("DELETE", "deployments/toys")):
            refused = requests.request(method, api + path, headers=bearer, allow_redirects=False)
            assert refused.status_code in (302, 403), (method, path, refused.status_code)
        # the same key on the gateway process, which the hub's proxy routes /services/kpl-gateway/ to
        gateway = f"{notebook.hub_url}/services/kpl-gateway/kpl/api/deployments/toys/predict"
        wait_for(
            lambda: json.loads(cli("deployment", "show", "toys", "--json")[1])["gateway_url"] == gateway,
            "the gateway URL in deployment show",
        )
        answer = requests.post(gateway, data=b"img", headers={**bearer, "Content-Type": "image/png"})
        assert answer.status_code == 200 and answer.json()["class_name"] == "steps-4", answer.text
        assert answer.headers["X-KPL-Model-Version"] == model
        refused = requests.post(gateway, data=b"img")
        assert refused.status_code == 401 and "your JupyterHub API token" in refused.json()["message"]
        # ivan's own hub API token, the notebook's or one made on the hub's token page (no hub cookie)
        image = {"Content-Type": "image/png"}
        for scheme, token in (("token", notebook.token), ("Bearer", hub.user_token("ivan"))):
            answer = requests.post(
                gateway + "?project=labs",
                data=b"img",
                headers={**image, "Authorization": f"{scheme} {token}"},
            )
            assert answer.status_code == 200 and answer.json()["class_name"] == "steps-4", answer.text
            assert answer.headers["X-KPL-Model-Version"] == model
        # sara's token reaches no deployment of ivan's project, named or not
        sara = {**image, "Authorization": f"token {hub.user_token('sara')}"}
        for query in ("?project=labs", "", "?project=secret"):
            answer = requests.post(gateway + query, data=b"img", headers=sara)
            assert answer.status_code == 404, (query, answer.text)
        # a token the hub does not know, and one of ivan's without access to the gateway
        bad = requests.post(
            gateway + "?project=labs", data=b"img", headers={"Authorization": "token nonsense"}
        )
        assert bad.status_code == 403, bad.text
        answer = hub.api("POST", "users/ivan/tokens", json={"scopes": ["access:services!service=kpl"]})
        assert answer.status_code == 201, answer.text
        narrow = {"Authorization": f"token {answer.json()['token']}"}
        answer = requests.post(gateway + "?project=labs", data=b"img", headers=narrow)
        assert answer.status_code == 403 and "access:services!service=kpl-gateway" in answer.text, answer.text
    finally:
        status, out, err = cli("deployment", "delete", "toys")
    assert status == 0 and out == "deployment toys deleted\n", err


def test_an_experiment_in_a_notebook(notebook: Notebook):
    """The service's rounds drive it (the command only follows) to its end, with the best trial's model."""
    cli = notebook.run
    search = ("--space", "steps=int:2:5", "--objective", "training/loss", "--direction", "minimize")
    status, out, err = cli(
        "experiment", "create", "tune", "toy", "--input", "data=notes", *search, "--trials", "2", "--follow"
    )
    assert status == 0, out + err
    assert "experiment: tune" in out and "state:      succeeded" in out, out
    shown = json.loads(cli("experiment", "show", "tune", "--json")[1])
    assert shown["project"] == "labs" and shown["state"] == "succeeded"
    assert [trial["state"] for trial in shown["trials"]] == ["complete", "complete"]
    best = json.loads(cli("job", "show", shown["best_job"], "--json")[1])
    assert shown["best_model"] == best["outputs"]["model"]["registered"] and shown["best_model"] in out

    status, out, err = cli("experiment", "stop", "tune")
    assert status == 2 and "experiment 'tune' is succeeded, not running" in err, out + err
    status, out, err = cli("experiment", "resume", "tune", "--trials", "3", "--follow")
    assert status == 0, out + err
    assert out.startswith("trial 0 complete") and "state:      succeeded" in out, out
    assert cli("experiment", "list")[1].splitlines()[2].split()[:2] == ["tune", "succeeded"]
