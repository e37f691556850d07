"""`kpl-lab` in a hub notebook talks to the shared service as its user, in the user's project."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import psutil

from kpl_lab.client import Client

from .conftest import Hub

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

data = io.get_input_path(key="data", default="./data")
out = io.get_output_path(key="model", default="./out")
print("training on", sorted(os.listdir(data)), flush=True)
fig = metric.MetricFigure("training", y1_name="loss", y2_name="accuracy")
for step in range(3):
    fig.push_metric(x=step, y1=1.0 / (step + 1), y2=step / 3)
    progress.send_progress((step + 1) / 3)
with open(os.path.join(out, "weights.txt"), "w") as f:
    f.write("3")
kpl_helper.done()
"""


def _zip(path: Path, files: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, content in files.items():
            archive.writestr(name, content)
    return path


def test_the_cli_in_a_notebook_works_in_the_users_project_on_the_service(hub: Hub, tmp_path: Path):
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

    def cli(*args: str) -> tuple[int, str, str]:
        done = subprocess.run(
            [sys.executable, "-m", "kpl_lab.cli", *args],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        return done.returncode, done.stdout, done.stderr

    status, out, err = cli("dataset", "list")
    assert status == 0, err
    assert "notes" in out and "two notes" in out and "hidden" not in out
    assert [d["name"] for d in json.loads(cli("dataset", "list", "--json")[1])] == ["notes"]

    algorithm = tmp_path / "toy"
    algorithm.mkdir()
    (algorithm / "environment.yml").write_text(ENVIRONMENT)
    (algorithm / "train.py").write_text(TRAIN)
    status, out, err = cli("algorithm", "add", str(algorithm))
    assert status == 0, err
    assert out.startswith("added algorithm toy:") and "in project labs" in out

    status, out, err = cli("job", "submit", "toy", "--input", "data=notes", "--follow")
    assert status == 0, out + err + hub.log()[-3000:]
    job_id = out.split()[2]
    assert f"job {job_id} succeeded after" in out and "loss=0.333" in out
    status, out, err = cli("job", "show", job_id)
    assert status == 0, err
    assert "state:       succeeded" in out and "inputs:      data=dataset:notes" in out
    assert "training" in out and "Traceback" not in out
    shown = json.loads(cli("job", "show", job_id, "--json")[1])
    assert shown["project"] == "labs"
    model = shown["outputs"]["model"]["registered"].removeprefix("model:").split(":")[0]
    status, out, err = cli("model", "list")
    assert status == 0, err
    assert out.splitlines()[2].split()[0] == model
    assert [m["name"] for m in json.loads(cli("model", "list", "--json")[1])] == [model]
    assert "training on [" in cli("job", "logs", job_id)[1]

    # the service knows the notebook's user: another project is refused with a sentence
    status, out, err = cli("--project", "secret", "dataset", "list")
    assert status == 2 and out == ""
    assert err.startswith("kpl-lab: error: ") and "secret" in err and "Traceback" not in err
    hub.stop_server("ivan")
