"""Hyperparameter searches end to end: Optuna in our database, trials as real jobs, pruning, restarts."""

from __future__ import annotations

import time

import pytest

from kpl_dataset import BasicType, WriteOnlyDataset
from kpl_lab.api.experiments import ExperimentRequest
from kpl_lab.engine.service import JobRequest
from kpl_lab.errors import BadRequest, Conflict
from kpl_lab.experiments.compare import compare_jobs
from kpl_lab.experiments.evaluation import evaluate_models

from .conftest import WAIT_SECONDS

pytestmark = pytest.mark.databases

# a curve that rises to `quality`: a trial's worth shows from its first points
CURVE = """\
import os, time
import kpl_helper as kh
from kpl_helper import metric

p = kh.get_parameter(default="./parameter.yml")
figure = metric.MetricFigure("score", y1_name="accuracy", y2_name="loss")
for step in range(p.steps):
    figure.push_metric(x=step + 1, y1=p.quality * (step + 1) / p.steps, y2=1 - p.quality)
    time.sleep(p.pause)
out = kh.io.get_output_path("model", "/nonexistent")
with open(os.path.join(out, "quality.txt"), "w") as f:
    f.write(str(p.quality))
kh.done()
"""
PARAMETERS = "quality: 0.5\nsteps: 4\npause: 0.02\nname: plain\n"


def curve(lab, **env):
    """Add the curve algorithm (one train function with a `model` output)."""
    return lab.algorithm(
        "curve", "python curve.py", {"curve.py": CURVE}, PARAMETERS, outputs=["model"], **env
    )


def request(**fields) -> ExperimentRequest:
    """Return an experiment on the curve algorithm, maximising its accuracy."""
    body = {
        "name": "search",
        "algorithm": "curve",
        "space": {"quality": {"type": "float", "low": 0.0, "high": 1.0}},
        "objective": {"metric": "score/accuracy", "direction": "maximize"},
        "budget": {"trials": 3},
        "sampler": {"name": "random", "seed": 1},
    } | fields
    return ExperimentRequest.model_validate(body)


def drive(lab, name: str, until=lambda experiment: experiment.state != "running", seen=None):
    """Run driver rounds until `until(experiment)`; call `seen(experiment)` after each round."""
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        lab.platform.experiments.tick()
        experiment = lab.platform.experiments.get("p", name)
        if seen:
            seen(experiment)
        if until(experiment):
            return experiment
        time.sleep(0.05)
    raise AssertionError(f"experiment {name} still {experiment.state}: {experiment.reason}")


def test_search_finds_the_best_trial_and_its_model(lab):
    lab = lab()
    curve(lab)
    created = lab.platform.experiments.create("p", request(parallelism=2, budget={"trials": 4}))
    assert created.state == "running"
    assert len(created.trials) == 2  # started at once, up to the parallelism
    assert created.warnings == [
        "objective 'score/accuracy': no earlier run of the train function of curve to check it against"
    ]
    experiment = drive(lab, "search")
    assert experiment.state == "succeeded", experiment.reason
    assert [t.state for t in experiment.trials] == ["complete"] * 4
    shown = lab.platform.experiments.model(experiment)
    values = [t.value for t in experiment.trials]
    assert shown.best_value == max(values)
    assert shown.best_params["quality"] == pytest.approx(shown.best_value)  # the curve ends at quality
    best_job = lab.jobs.get("p", shown.best_job)
    assert (best_job.experiment, best_job.trial) == ("search", shown.best_trial)
    assert best_job.parameters["quality"] == shown.best_params["quality"]
    model = lab.platform.catalog.get_model("p", shown.best_model.removeprefix("model:"))
    assert (lab.platform.catalog.path(model) / "quality.txt").read_text() == str(shown.best_params["quality"])
    study = lab.platform.experiments.study(experiment)  # Optuna's own records, in our database
    assert study.best_value == shown.best_value
    assert len(study.trials) == 4
    for kind in ("history", "importance", "parallel"):
        assert lab.platform.experiments.plot("p", "search", kind).data


def test_space_and_objective_are_checked_before_any_trial(lab):
    lab = lab()
    curve(lab)
    bad = request(
        space={
            "nope": {"type": "float", "low": 0, "high": 1},
            "steps": {"type": "float", "low": 0.5, "high": 2.5},
            "name": {"type": "categorical", "choices": ["a", 3]},
        },
        inputs={"data": "dataset:missing"},
    )
    with pytest.raises(BadRequest) as refused:
        lab.platform.experiments.create("p", bad)
    fields = [field for field, _ in refused.value.errors]
    assert fields[0] == "space.nope" and "has no parameter 'nope'" in refused.value.errors[0][1]
    assert "space.steps" in fields and "inputs.data" in fields
    assert lab.jobs.list("p") == []
    with pytest.raises(BadRequest, match="grid sampler needs"):
        lab.platform.experiments.create("p", request(sampler={"name": "grid"}))
    # a metric the algorithm's earlier runs never pushed is a warning, not a refusal
    done = lab.wait(lab.jobs.submit(JobRequest(project="p", algorithm="curve")).id)
    assert done.state == "succeeded"
    warned = lab.platform.experiments.create(
        "p", request(objective={"metric": "score/f1"}, budget={"trials": 1})
    )
    assert warned.warnings == [
        "objective 'score/f1': never pushed by the 1 earlier runs of the train function of curve "
        "(they pushed: score/accuracy, score/loss)"
    ]
    with pytest.raises(Conflict):
        lab.platform.experiments.create("p", request(objective={"metric": "score/f1"}))
    assert drive(lab, "search").state == "failed"  # the one trial pushed no f1: no trial completed


def test_a_grid_is_counted_never_listed_before_it_is_refused(lab, monkeypatch):
    from kpl_lab.experiments import search

    def listed(spec):
        raise AssertionError(f"the grid of {spec} was listed")

    monkeypatch.setattr(search, "grid_values", listed)
    lab = lab()
    curve(lab)
    space = {
        "steps": {"type": "int", "low": 1, "high": 3_000_000},  # alone past the 10,000 a grid takes
        "quality": {"type": "float", "low": 0, "high": 1, "step": 0.001},
    }
    with pytest.raises(BadRequest) as refused:
        lab.platform.experiments.create("p", request(space=space, sampler={"name": "grid"}))
    assert refused.value.errors == [
        ("space.steps", "gives the grid 3,000,000 values; the grid sampler takes at most 10,000")
    ]
    space["steps"]["high"] = 1000
    with pytest.raises(BadRequest) as refused:
        lab.platform.experiments.create("p", request(space=space, sampler={"name": "grid"}))
    assert refused.value.errors == [
        (
            "space",
            "the grid has 1,000 (steps) × 1,001 (quality) = 1,001,000 points; the grid sampler takes at most 10,000",
        )
    ]
    assert lab.jobs.list("p") == []


def test_pruning_stops_trials_on_their_curve(lab):
    lab = lab()
    curve(lab)
    slow = {"steps": 30, "pause": 0.25}
    experiment = lab.platform.experiments.create(
        "p",
        request(
            parameters=slow,
            space={"quality": {"type": "categorical", "choices": [0.9, 0.2, 0.3, 0.1]}},
            sampler={"name": "grid", "seed": 0},
            budget={"trials": 4},
            pruner={"name": "median", "startup_trials": 1, "warmup_steps": 2},
        ),
    )
    assert experiment.sampler["name"] == "grid"
    experiment = drive(lab, "search")
    states = {t.params["quality"]: t.state for t in experiment.trials}
    assert states[0.9] == "complete"
    pruned = [t for t in experiment.trials if t.state == "pruned"]
    assert pruned, states
    for trial in pruned:
        job = lab.wait(trial.job_id)
        assert job.state == "stopped"
        assert job.reason.startswith("pruned by experiment search after")
        assert trial.reported < slow["steps"]
        assert trial.value < 0.9 * trial.reported / slow["steps"] + 1e-9
    best = lab.platform.experiments.model(experiment)
    assert best.best_params == {"quality": 0.9}


def test_quota_limits_parallel_trials(lab):
    lab = lab(quotas={"p": {"cpu": 1}})
    curve(lab, cpu=1)
    queued = []

    def watch(experiment) -> None:
        states = [lab.jobs.get("p", t.job_id).state for t in experiment.trials if t.state == "running"]
        assert states.count("running") <= 1
        queued.append(states.count("queued"))

    lab.platform.experiments.create("p", request(parallelism=3, parameters={"pause": 0.1}))
    experiment = drive(lab, "search", seen=watch)
    assert experiment.state == "succeeded"
    assert max(queued) >= 1  # trials waited in the project's queue, not in the experiment
    jobs = sorted((lab.jobs.get("p", t.job_id) for t in experiment.trials), key=lambda job: job.started)
    for before, after in zip(jobs, jobs[1:], strict=False):
        assert after.started >= before.finished


def test_restart_mid_experiment_resumes(lab):
    lab = lab()
    curve(lab)
    lab.platform.experiments.lease_seconds = 1.0  # the crashed server's lease lapses quickly
    lab.platform.experiments.create(
        "p", request(parallelism=2, budget={"trials": 5}, parameters={"pause": 0.1})
    )
    drive(lab, "search", until=lambda e: any(t.state == "complete" for t in e.trials))
    lab.restart()  # the server goes away without a word; its jobs keep running
    lab.jobs.reconcile()
    experiment = drive(lab, "search")
    assert experiment.state == "succeeded", experiment.reason
    assert [t.number for t in experiment.trials] == [0, 1, 2, 3, 4]
    assert [t.state for t in experiment.trials] == ["complete"] * 5
    assert len(lab.platform.experiments.study(experiment).trials) == 5


def test_stop_and_resume(lab):
    lab = lab()
    curve(lab)
    service = lab.platform.experiments
    service.create("p", request(parallelism=2, budget={"trials": 3}, parameters={"pause": 0.5}))
    stopped = service.stop("p", "search")
    assert stopped.state == "stopped"
    asked = sorted(t.params["quality"] for t in stopped.trials)
    assert [t.state for t in stopped.trials] == ["stopped", "stopped"]
    for trial in stopped.trials:
        assert lab.wait(trial.job_id).state == "stopped"
    with pytest.raises(Conflict):
        service.stop("p", "search")
    resumed = service.resume("p", "search")
    assert sorted(t.params["quality"] for t in resumed.trials if t.state == "running") == asked
    experiment = drive(lab, "search")
    assert experiment.state == "succeeded"
    assert [t.state for t in experiment.trials].count("complete") == 3
    with pytest.raises(Conflict, match="larger budget"):
        service.resume("p", "search")
    more = service.resume("p", "search", trials=4)
    assert more.state == "running"
    assert drive(lab, "search").trials[-1].state == "complete"


def test_compare_jobs(lab):
    lab = lab()
    version = curve(lab)
    first = lab.wait(
        lab.jobs.submit(JobRequest(project="p", algorithm="curve", parameters={"quality": 0.4})).id
    )
    second = lab.wait(
        lab.jobs.submit(JobRequest(project="p", algorithm="curve", parameters={"quality": 0.8})).id
    )
    comparison = compare_jobs(lab.platform, "p", [first.id, second.id])
    assert comparison.differing_parameters == ["quality"]
    assert comparison.differing_inputs == [] and not comparison.differing_algorithms
    assert comparison.common_metrics == ["score/accuracy", "score/loss"]
    shown = {job.id: job for job in comparison.jobs}
    assert shown[second.id].algorithm == version.ref
    accuracy = next(m for m in shown[second.id].metrics if m.series == "accuracy")
    assert (accuracy.points, accuracy.final, accuracy.best, accuracy.best_x) == (4, 0.8, 0.8, 4.0)
    loss = next(m for m in shown[first.id].metrics if m.series == "loss")
    assert loss.best == pytest.approx(0.6)  # smaller is better for a loss
    assert shown[first.id].duration_seconds > 0
    with pytest.raises(BadRequest, match="give 2 to"):
        compare_jobs(lab.platform, "p", [first.id])


EVALUATED = """\
version: 1
image:
  runs: []
train:
  resource:
    limits:
      cpu: 1
      memory: 256
  outputs:
    - key: model
      name: scorer
  cmd: python train.py
test:
  resource:
    limits:
      cpu: 1
      memory: 256
  inputs:
    - key: data
      name: data
    - key: model
      name: model
  cmd: python test.py
"""
SCORER_TRAIN = """\
import os
import kpl_helper as kh

p = kh.get_parameter(default="./parameter.yml")
with open(os.path.join(kh.io.get_output_path("model", "/nonexistent"), "quality.txt"), "w") as f:
    f.write(str(p.quality))
kh.done()
"""
SCORER_TEST = """\
import os
import kpl_helper as kh
from kpl_helper import result

model = kh.io.get_input_path("model", "/nonexistent")
data = kh.io.get_input_path("data", "/nonexistent")
quality = float(open(os.path.join(model, "quality.txt")).read())
result.send_scalar_result(accuracy=quality, records=len(os.listdir(data)))
kh.done()
"""


def test_evaluate_model_versions_side_by_side(lab, tmp_path):
    lab = lab()
    folder = tmp_path / "scorer"
    folder.mkdir()
    (folder / "environment.yml").write_text(EVALUATED)
    (folder / "parameter.yml").write_text("quality: 0.5\n")
    (folder / "train.py").write_text(SCORER_TRAIN)
    (folder / "test.py").write_text(SCORER_TEST)
    lab.platform.catalog.add_algorithm("p", folder)
    data = tmp_path / "data"
    writer = WriteOnlyDataset(str(data), "test", {"x": BasicType.Int})
    writer.write({"x": 1})
    writer.close()
    lab.platform.catalog.add_dataset("p", "holdout", data)
    models = []
    for quality in (0.3, 0.7):
        job = lab.jobs.submit(JobRequest(project="p", algorithm="scorer", parameters={"quality": quality}))
        models.append(lab.wait(job.id).outputs["model"]["registered"])
    jobs = evaluate_models(lab.platform, "p", "scorer", "dataset:holdout", models)
    for job in jobs:
        assert lab.wait(job.id).state == "succeeded"
    comparison = compare_jobs(lab.platform, "p", [job.id for job in jobs])
    assert [job.results["accuracy"] for job in comparison.jobs] == [0.3, 0.7]
    assert comparison.differing_results == ["accuracy"]  # the same records, different accuracy
    assert comparison.differing_inputs == ["model"]
    assert [job.inputs["model"] for job in comparison.jobs] == [m.removeprefix("model:") for m in models]
    with pytest.raises(BadRequest, match="at least one model"):
        evaluate_models(lab.platform, "p", "scorer", "dataset:holdout", [])
