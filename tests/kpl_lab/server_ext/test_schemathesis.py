"""Schemathesis against a live server: what docs/openapi.yaml states is what the server enforces.

Every check runs, in every phase (examples, coverage, fuzzing, stateful). The read-only
operations are pointed at objects made beforehand (a dataset, an algorithm and its job, the
model it registered, an experiment, a pipeline run, an annotation task with a label), so their query arguments are checked by
the handlers themselves instead of stopping at a 404; see schemathesis.toml.
"""

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import schemathesis  # noqa: F401 - the test extra installs it; fail loudly when it is missing
import yaml

from .conftest import imagefolder_zip
from .test_jobs_api import TRAIN, add_algorithm
from .test_openapi_bodies import wait_run

ROOT = Path(__file__).resolve().parents[3]
OPENAPI = ROOT / "docs" / "openapi.yaml"
CONFIG = Path(__file__).with_name("schemathesis.toml")
EXAMPLES = 20  # per operation and phase: the run takes about two minutes on two cores
RUN = "from schemathesis.cli import schemathesis; schemathesis()"
COPY = (
    "version: 1\nname: pets-copy\nnodes:\n  raw: {type: dataset, dataset: pets}\n"
    "  kept: {type: select, input: raw, where: 'true'}\n  save: {type: save_dataset, input: kept, name: pets-copy}\n"
)


async def objects(api) -> dict[str, str]:
    """Make one of each object the read-only operations are pointed at; return their names and ids."""
    code, dataset = await api.upload("datasets", imagefolder_zip(), name="pets", format="imagefolder")
    assert code == 201, dataset
    algorithm = await add_algorithm(api, "trainer", TRAIN, outputs=["model"])
    _, job = await api.post("jobs", {"algorithm": "trainer", "parameters": {"epochs": 1}})
    job = await api.wait_job(job["id"])
    assert job["state"] == "succeeded", job
    model, model_version = "trainer-model", job["outputs"]["model"]["registered"].rsplit(":", 1)[1]
    code, aliased = await api.call("PUT", f"models/{model}/aliases/production", {"version": model_version})
    assert code == 200, aliased
    search = {
        "name": "tune",
        "algorithm": "trainer",
        "space": {"epochs": {"type": "int", "low": 1, "high": 2}},
        "objective": {"metric": "loss/train", "direction": "minimize"},
        "budget": {"trials": 1},
    }
    code, experiment = await api.post("experiments", search)  # its plots answer 409 until its trial ends
    assert code == 201, experiment
    code, run = await api.post("pipelines/runs", {"text": COPY})
    assert code == 201, run
    assert (await wait_run(api, run["id"]))["state"] == "succeeded"
    task = {
        "name": "pets-class",
        "dataset": "pets",
        "kind": "image_class",
        "label_schema": {"classes": [{"name": "cat"}, {"name": "dog"}]},
    }
    code, created = await api.post("annotation/tasks", task)
    assert code == 201, created
    code, label = await api.call(
        "PUT", "annotation/tasks/pets-class/records/0/label", {"value": {"class_name": "dog"}, "version": 0}
    )
    assert code == 200, label
    code, created = await api.post("annotation/tasks", {**task, "name": "pets-boxes", "kind": "boxes"})
    assert code == 201, created
    return {
        "KPL_ST_DATASET_VERSION": dataset["version"],
        "KPL_ST_ALGORITHM_VERSION": algorithm["version"],
        "KPL_ST_JOB": job["id"],
        "KPL_ST_MODEL": model,
        "KPL_ST_MODEL_VERSION": model_version,
        "KPL_ST_RUN": run["id"],
    }


async def test_schemathesis_finds_no_failure(api, jp_http_port, jp_base_url, jp_serverapp, tmp_path):
    made = await objects(api)
    command = [
        sys.executable,
        "-c",
        RUN,
        f"--config-file={CONFIG}",
        "run",
        str(OPENAPI),
        f"--url=http://127.0.0.1:{jp_http_port}{jp_base_url.rstrip('/')}/kpl/api",
        f"--header=Authorization: token {jp_serverapp.identity_provider.token}",
        "--checks=all",
        # a request without credentials answers 403, as Jupyter Server does (our documented
        # choice, docs/openapi.yaml); this check wants 401 for a missing Authorization header
        "--exclude-checks=missing_required_header",
        "--phases=examples,coverage,fuzzing,stateful",
        f"--max-examples={EXAMPLES}",
        "--seed=1",
        "--workers=1",
        "--no-color",
    ]
    # the server runs on this test's event loop: run the CLI without blocking it
    process = await asyncio.create_subprocess_exec(
        *command,
        stdout=asyncio.subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
        env={**os.environ, **made},
    )
    output, _ = await process.communicate()
    text = output.decode(errors="replace")
    assert process.returncode == 0, text[-20000:]
    # every operation was selected, and the coverage phase ran (a run that tests nothing passes too)
    operations = sum(len(item) for item in yaml.safe_load(OPENAPI.read_text())["paths"].values())
    assert f"{operations} selected / {operations} total" in text, text[-20000:]
    assert re.search(r"Coverage \(in [0-9.]+s\)\n\n +✅ [0-9]+ passed", text), text[-20000:]
