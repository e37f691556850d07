"""Experiments through a real hub, from the JupyterLab extension's REST calls and from `%kpl_tune` in a kernel.

Trials are jobs of the project: the service's rounds record their ends, tell Optuna and
finish the experiment, `succeeded` with its best trial's model registered.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import requests
import websocket

from .conftest import DEADLINE, Hub, wait_for, write_gated

PROJECT = "tuning"
SEARCH = {
    "algorithm": "gated",
    "space": {"steps": {"type": "int", "low": 2, "high": 6}},
    "objective": {"metric": "training/loss", "direction": "minimize"},  # 1/steps: the most steps win
    "budget": {"trials": 2},
    "parallelism": 2,
    "sampler": {"name": "random", "seed": 7},
}


@dataclass
class Notebook:
    """A member's running notebook server and their API token."""

    hub: Hub
    user: str
    token: str

    def lab(self, method: str, path: str, **kwargs) -> requests.Response:
        """Call the KPL API as the JupyterLab extension does: its server's /kpl/api/, forwarded to the service."""
        with requests.Session() as session:
            return session.request(
                method,
                f"{self.hub.url}/user/{self.user}/kpl/api/{path}",
                headers={"Authorization": f"token {self.token}"},
                timeout=60,
                **kwargs,
            )

    def run_cell(self, code: str) -> str:
        """Run `code` as a cell in a new kernel of this notebook server; return what it printed and displayed."""
        api = f"{self.hub.url}/user/{self.user}/api/kernels"
        headers = {"Authorization": f"token {self.token}"}
        started = requests.post(api, json={"name": "python3"}, headers=headers, timeout=60)
        assert started.status_code == 201, started.text
        kernel = started.json()["id"]
        channels = websocket.create_connection(
            f"ws://127.0.0.1:{self.hub.port}/user/{self.user}/api/kernels/{kernel}/channels",
            header=[f"Authorization: token {self.token}"],
            timeout=DEADLINE,
        )
        try:
            request = uuid.uuid4().hex
            channels.send(
                json.dumps(
                    {
                        "header": {
                            "msg_id": request,
                            "msg_type": "execute_request",
                            "username": self.user,
                            "session": uuid.uuid4().hex,
                            "version": "5.3",
                        },
                        "parent_header": {},
                        "metadata": {},
                        "content": {
                            "code": code,
                            "silent": False,
                            "allow_stdin": False,
                            "stop_on_error": True,
                        },
                        "channel": "shell",
                    }
                )
            )
            shown = []
            end = time.monotonic() + DEADLINE  # only so that a cell that never ends fails instead of hanging
            while True:
                if time.monotonic() > end:
                    raise AssertionError(f"the cell did not end within {DEADLINE:.0f} s:\n{''.join(shown)}")
                message = json.loads(channels.recv())
                if message.get("parent_header", {}).get("msg_id") != request:
                    continue
                kind, content = message["msg_type"], message["content"]
                if kind == "stream":
                    shown.append(content["text"])
                elif kind in ("display_data", "execute_result"):
                    shown.append(content["data"].get("text/plain", "") + "\n")
                elif kind == "error":
                    shown.append("\n".join(content["traceback"]))
                elif kind == "status" and content["execution_state"] == "idle":
                    return "".join(shown)
        finally:
            channels.close()
            requests.delete(f"{api}/{kernel}", headers=headers, timeout=60)


@pytest.fixture(scope="module")
def notebook(hub: Hub, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Notebook]:
    hub.add_project(PROJECT, ["tess"], {})
    algorithm = write_gated(tmp_path_factory.mktemp("algorithm") / "gated")
    added = hub.cli("--project", PROJECT, "algorithm", "add", str(algorithm))
    assert added.returncode == 0, added.stderr
    assert hub.spawn("tess").status_code in (201, 202)
    hub.wait_ready("tess")
    yield Notebook(hub, "tess", hub.user_token("tess"))
    hub.stop_server("tess")


def ended(notebook: Notebook, name: str) -> dict:
    """Wait until the experiment is no longer running (the service's rounds drive it); return it."""

    def found() -> dict | None:
        answer = notebook.lab("GET", f"experiments/{name}")
        assert answer.status_code == 200, answer.text
        return answer.json() if answer.json()["state"] != "running" else None

    return wait_for(found, f"the end of experiment {name}")


def assert_best_model(notebook: Notebook, experiment: dict) -> None:
    """The best trial is the complete one of the fewest loss, and its job's model is registered as the best model."""
    complete = [trial for trial in experiment["trials"] if trial["state"] == "complete"]
    best = min(complete, key=lambda trial: trial["value"])
    assert experiment["best_trial"] == best["number"] and experiment["best_value"] == best["value"]
    assert experiment["best_params"] == best["params"] and best["value"] == 1 / best["params"]["steps"]
    job = notebook.lab("GET", f"jobs/{experiment['best_job']}").json()
    assert job["state"] == "succeeded" and job["outputs"]["model"]["registered"] == experiment["best_model"]
    name, version = experiment["best_model"].removeprefix("model:").split(":")
    model = notebook.lab("GET", f"models/{name}/versions/{version}")
    assert model.status_code == 200, model.text


def test_an_experiment_from_the_lab_extension_succeeds_with_a_best_model(notebook: Notebook):
    created = notebook.lab("POST", "experiments", json={"name": "from-ui", **SEARCH})
    assert created.status_code == 201, created.text
    assert created.json()["state"] == "running" and len(created.json()["trials"]) == 2

    experiment = ended(notebook, "from-ui")
    assert experiment["state"] == "succeeded", experiment["reason"]
    assert [trial["state"] for trial in experiment["trials"]] == ["complete", "complete"]
    assert_best_model(notebook, experiment)
    listed = notebook.lab("GET", "experiments").json()["experiments"]
    assert [(e["name"], e["state"]) for e in listed if e["name"] == "from-ui"] == [("from-ui", "succeeded")]

    # the side panel's resume with a larger budget: one more trial, driven to the end again
    resumed = notebook.lab("POST", "experiments/from-ui/resume", json={"trials": 3})
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["state"] == "running"
    experiment = ended(notebook, "from-ui")
    assert experiment["state"] == "succeeded", experiment["reason"]
    assert [trial["state"] for trial in experiment["trials"]] == ["complete"] * 3
    assert_best_model(notebook, experiment)


def test_kpl_tune_in_a_notebook_kernel_succeeds_with_a_best_model(notebook: Notebook):
    shown = notebook.run_cell(
        "%load_ext kpl_lab\n"
        "%kpl_tune from-magic gated --space steps=int:2:6 --objective training/loss --direction minimize "
        "--trials 2 --parallelism 2 --sampler random --seed 7 --wait"
    )
    assert "Traceback" not in shown, shown
    assert "experiment from-magic: 2 trials started" in shown, shown
    ending = re.search(
        r"^experiment from-magic succeeded: best trial (\d+) \S+ .*, model (\S+)$", shown, re.M
    )
    assert ending, shown

    experiment = notebook.lab("GET", "experiments/from-magic").json()
    assert experiment["state"] == "succeeded" and experiment["project"] == PROJECT
    assert (experiment["best_trial"], experiment["best_model"]) == (int(ending[1]), ending[2])
    assert_best_model(notebook, experiment)
