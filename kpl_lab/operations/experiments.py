"""Experiments: compare jobs; create, list, show, stop and resume searches; plot their studies."""

from __future__ import annotations

from ..api.experiments import (
    Comparison,
    Experiment,
    ExperimentList,
    ExperimentRequest,
    Plot,
    PlotKind,
    ResumeExperimentRequest,
)
from ..errors import BadRequest
from ..experiments.compare import compare_jobs
from .caller import Caller


def compare(caller: Caller, ids: str | None) -> Comparison:
    """Answer two or more jobs (comma-separated ids) side by side."""
    return compare_jobs(caller.platform, caller.project, [part for part in (ids or "").split(",") if part])


def list_experiments(caller: Caller) -> ExperimentList:
    """List the project's experiments, newest first."""
    service = caller.platform.experiments
    return ExperimentList(experiments=[service.model(row) for row in service.list(caller.project)])


def create(caller: Caller, body: ExperimentRequest) -> Experiment:
    """Check and create an experiment; its first trials start at once."""
    service = caller.platform.experiments
    return service.model(service.create(caller.project, body, user=caller.user))


def show_experiment(caller: Caller, name: str) -> Experiment:
    """Show an experiment with its trials and best trial."""
    service = caller.platform.experiments
    return service.model(service.get(caller.project, name))


def stop(caller: Caller, name: str) -> Experiment:
    """Stop an experiment and its running trials."""
    service = caller.platform.experiments
    return service.model(service.stop(caller.project, name))


def resume(caller: Caller, name: str, body: ResumeExperimentRequest) -> Experiment:
    """Resume a stopped experiment, or a finished one with a larger budget."""
    service = caller.platform.experiments
    return service.model(service.resume(caller.project, name, trials=body.trials, seconds=body.seconds))


def plot(caller: Caller, name: str, kind: str) -> Plot:
    """Answer an Optuna visualisation of the experiment's study as a Plotly figure."""
    try:
        shown = PlotKind(kind)
    except ValueError:
        known = ", ".join(k.value for k in PlotKind)
        raise BadRequest(f"kind: {kind!r} is not one of {known}", field="kind") from None
    return caller.platform.experiments.plot(caller.project, name, shown)
