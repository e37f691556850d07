"""A real hyperparameter search on the digits example: Optuna finds a better learning rate than a bad one."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from traitlets.config import Config

from kpl_lab.api.experiments import ExperimentRequest
from kpl_lab.engine.service import JobRequest
from kpl_lab.platform import Platform

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
WAIT_SECONDS = 600
# small and quick: two passes over the digits at one thread each
QUICK = {"epochs": 2, "threads": 1}


@pytest.fixture
def platform(tmp_path, load_example):
    config = Config({"Ledger": {"cpu": 4.0, "memory": 8192}, "LocalExecutor": {"tick_seconds": 0.2}})
    platform = Platform(home=str(tmp_path / "home"), config=config)
    digits = tmp_path / "digits"
    load_example("datasets/make_digits.py").make_digits(digits, size=16)
    platform.catalog.add_dataset("p", "digits", digits)
    platform.catalog.add_algorithm("p", EXAMPLES / "algorithms" / "image-classification")
    yield platform
    platform.close()


def final_accuracy(platform, job_id: str) -> float:
    return platform.jobs.latest_metrics("p", job_id)["accuracy"]["eval_accuracy"][1]


@pytest.mark.slow
def test_search_finds_a_better_learning_rate_than_a_bad_default(platform):
    inputs = {"data": "dataset:digits"}
    bad = platform.jobs.submit(
        JobRequest(
            project="p", algorithm="image-classification", inputs=inputs, parameters={**QUICK, "lr": 1e-5}
        )
    )
    request = ExperimentRequest.model_validate(
        {
            "name": "digits-lr",
            "algorithm": "image-classification",
            "inputs": inputs,
            "parameters": QUICK,
            "space": {"lr": {"type": "float", "low": 1e-3, "high": 3e-2, "log": True}},
            "objective": {"metric": "accuracy/eval_accuracy", "direction": "maximize"},
            "budget": {"trials": 2},
            "parallelism": 2,
            "sampler": {"name": "tpe", "seed": 0},
        }
    )
    deadline = time.monotonic() + WAIT_SECONDS
    while platform.jobs.get("p", bad.id).state in ("queued", "running"):
        assert time.monotonic() < deadline, "the bad run did not end"
        time.sleep(0.5)
    assert platform.jobs.get("p", bad.id).state == "succeeded"
    bad_accuracy = final_accuracy(platform, bad.id)
    service = platform.experiments
    created = service.create("p", request)
    assert created.warnings == []  # the bad run pushed accuracy/eval_accuracy: the objective is known
    while (experiment := service.get("p", "digits-lr")).state == "running":
        assert time.monotonic() < deadline, "the search did not end"
        service.tick()
        time.sleep(0.5)
    shown = service.model(experiment)
    assert shown.state == "succeeded", shown.reason
    assert shown.best_value == final_accuracy(platform, shown.best_job)
    assert shown.best_value > bad_accuracy + 0.3, (bad_accuracy, shown.best_value)
    assert shown.best_params["lr"] > 1e-5
    assert shown.best_model.startswith("model:")  # the best trial's model, registered as every job's is
