"""The API's fixed sets of words: job states, an objective's direction, samplers and pruners.

Plain enums, no pydantic: the models of `kpl_lab.api` take them as field types, and `kpl-lab`
offers them as choices without loading a model.
"""

from __future__ import annotations

from enum import Enum


class JobState(str, Enum):
    """Where a job is: queued until its resources are free, running, then one final state."""

    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    stopped = "stopped"
    lost = "lost"


JOB_STATES = tuple(state.value for state in JobState)
FINAL_STATES = (JobState.succeeded.value, JobState.failed.value, JobState.stopped.value, JobState.lost.value)


class Direction(str, Enum):
    """Whether the objective is to be made as large or as small as possible."""

    maximize = "maximize"
    minimize = "minimize"


class SamplerName(str, Enum):
    """Optuna's samplers offered."""

    random = "random"
    grid = "grid"
    tpe = "tpe"
    cmaes = "cmaes"


class PrunerName(str, Enum):
    """Optuna's pruners offered."""

    median = "median"
    successive_halving = "successive_halving"
    hyperband = "hyperband"
