"""`kpl-lab up`'s demo: its sample data, and the sample job trained with the submit form's defaults.

On a 2-CPU machine where the user's notebook holds one, the sample algorithm (numpy, one CPU)
fits beside it as environment.yml asks: the form's defaults (kpl_lab/fit.py, as
labextension/src/jobForm.ts) change nothing, and the job trains at once.
"""

from __future__ import annotations

import dataclasses
import time

import pytest
from traitlets.config import Config

from kpl_lab.engine.launch import Resources
from kpl_lab.engine.service import JobRequest
from kpl_lab.fit import fit_now
from kpl_lab.hub.up import SAMPLE_ALGORITHM, SAMPLE_DATASET, SAMPLE_PROJECT, add_sample_data
from kpl_lab.platform import Platform
from kpl_lab.server_ext.handlers.devices import devices_model
from kpl_lab.spawner.quota import release_notebook, reserve_notebook

WAIT_SECONDS = 900


@pytest.mark.slow
def test_the_sample_job_trains_with_the_forms_defaults_beside_a_notebook(tmp_path, capsys):
    home = tmp_path / "home"
    assert add_sample_data(home)  # the digits and the sample algorithm need nothing beyond the platform
    assert "no sample data" not in capsys.readouterr().out
    config = Config({"Ledger": {"cpu": 2.0, "memory": 8192}, "LocalExecutor": {"tick_seconds": 0.2}})
    platform = Platform(home=str(home), config=config)
    try:
        ledger = platform.jobs.ledger
        assert reserve_notebook(ledger, SAMPLE_PROJECT, "admin/", Resources(cpu=1, memory=2048), {})
        version = platform.catalog.get_algorithm(SAMPLE_PROJECT, SAMPLE_ALGORITHM)
        spec = platform.catalog.read_algorithm(version).spec.function("train")
        limits = dataclasses.asdict(spec.resource.limits)
        devices = devices_model(platform, SAMPLE_PROJECT).model_dump(mode="json")
        resources, notes = fit_now(limits, devices)
        assert (limits["cpu"], resources, notes) == (1, {}, [])  # nothing to cap
        request = JobRequest(
            project=SAMPLE_PROJECT,
            algorithm=SAMPLE_ALGORITHM,
            inputs={"data": f"dataset:{SAMPLE_DATASET}"},
            resources=resources,
        )
        job = platform.jobs.submit(request, user="admin")
        assert job.state == "running"  # beside the notebook, not queued behind it
        deadline = time.monotonic() + WAIT_SECONDS
        while not (job := platform.jobs.get(SAMPLE_PROJECT, job.id)).is_final:
            assert time.monotonic() < deadline, f"job {job.id} still {job.state}"
            time.sleep(1)
        assert job.state == "succeeded", job.reason + job.last_log_lines
        latest = platform.jobs.latest_metrics(SAMPLE_PROJECT, job.id)
        assert latest["accuracy"]["eval_accuracy"][1] > 0.8  # ten classes: chance is 0.1
        release_notebook(ledger, "admin/")
    finally:
        platform.close()
