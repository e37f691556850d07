"""Experiments: comparing jobs, and hyperparameter searches whose trials are jobs."""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from .base import Body, matching
from .catalog import Name, Ref
from .jobs import InputRef, JobState, ResourceRequest

# FIGURE/SERIES, or SERIES when one figure of the algorithm's jobs has it
METRIC_PATTERN = r"^[^/]+(/[^/]+)?$"
if TYPE_CHECKING:  # a checked string to type checkers
    MetricName = str
else:
    MetricName = matching(METRIC_PATTERN)


# comparing


class ComparedMetric(Body):
    """One metric series of one job: its last and best points."""

    figure: str
    series: str
    points: int
    final: float | None = Field(description="the last value pushed")
    best: float | None = Field(description="the largest value for an accuracy-like series, else the smallest")
    best_x: float | None = Field(description="the x of the best value")


class ComparedJob(Body):
    """What a comparison shows of one job."""

    id: str
    state: JobState
    algorithm: str = Field(description="NAME:VERSION")
    function: str
    inputs: dict[str, str] = Field(description="input key -> NAME:VERSION it resolved to")
    parameters: dict[str, Any] = Field(description="flattened (dotted) parameter -> value")
    metrics: list[ComparedMetric]
    results: dict[str, Any] = Field(
        description="scalar results the job sent (kpl_helper.result), e.g. a test's accuracy"
    )
    duration_seconds: float | None = Field(description="from start to end (or now while it runs)")
    peak_memory_mb: float | None
    limits: dict[str, Any] = Field(description="cpu, memory (MB), shm and device counts it ran with")
    experiment: str | None
    trial: int | None


class Comparison(Body):
    """Two or more jobs side by side, with the keys whose values differ."""

    jobs: list[ComparedJob]
    differing_parameters: list[str] = Field(description="dotted parameters whose values are not all equal")
    differing_inputs: list[str] = Field(description="input keys whose versions are not all equal")
    differing_algorithms: bool = Field(description="the jobs ran different algorithm versions or functions")
    common_metrics: list[str] = Field(description="FIGURE/SERIES every job pushed (overlay these curves)")
    differing_results: list[str] = Field(description="scalar results whose values are not all equal")


# searching


# Optuna keeps every value as a float: integers up to 10^15 stay exact, and nothing is searched beyond.
LARGEST = 10**15
# the most a space lists: a categorical's choices, a float range's steps, the grid's combinations
MAX_VALUES = 10_000


# a rule across two fields, which JSON Schema cannot state: the server checks it
AT_LEAST_LOW = "at least low (else 400 naming this field, e.g. `space.lr.high`)"


def _bound(**more: Any) -> Any:
    """Return a Field of a finite number within ±LARGEST."""
    return Field(ge=-LARGEST, le=LARGEST, allow_inf_nan=False, **more)


def _refuse(message: str, **context: Any) -> PydanticCustomError:
    return PydanticCustomError("search_space", message, context)


def _not_below_low(high: float, info: ValidationInfo) -> float:
    low = info.data.get("low")
    if low is not None and high < low:
        raise _refuse("must not be below low ({low})", low=low)
    return high


def _log_needs_positive_low(log: bool, info: ValidationInfo) -> bool:
    low = info.data.get("low")
    if log and low is not None and low <= 0:
        raise _refuse("a log scale needs low > 0, got {low}", low=low)
    return log


class FloatRange(BaseModel):
    """A float drawn from [low, high] (low <= high), on a log scale (low > 0) or in steps, not both."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["float"]
    low: float = _bound()
    high: float = _bound(description=AT_LEAST_LOW)
    log: bool = Field(default=False, description="a log scale (needs low > 0, takes no step)")
    step: float | None = Field(
        default=None,
        gt=0,
        le=LARGEST,
        allow_inf_nan=False,
        description=f"(high - low) / step is at most {MAX_VALUES:,}",
    )

    _high = field_validator("high")(_not_below_low)
    _log = field_validator("log")(_log_needs_positive_low)

    @field_validator("step")
    @classmethod
    def _step(cls, step: float | None, info: ValidationInfo) -> float | None:
        low, high = info.data.get("low"), info.data.get("high")
        if step is None or low is None or high is None:
            return step
        if info.data.get("log"):
            raise _refuse("a log scale takes no step")
        if (high - low) / step > MAX_VALUES * (1 + 1e-9):  # 1 / 1e-4 is 10000.000000000002
            raise _refuse(
                "cuts [{low}, {high}] into more than {most} steps: take a step of at least {least}",
                low=low,
                high=high,
                most=f"{MAX_VALUES:,}",
                least=f"{(high - low) / MAX_VALUES:.6g}",
            )
        return step


class IntRange(BaseModel):
    """An integer drawn from [low, high] (low <= high), on a log scale (low > 0) or in steps, not both."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["int"]
    low: int = _bound()
    high: int = _bound(description=AT_LEAST_LOW)
    log: bool = Field(default=False, description="a log scale (needs low > 0, takes no step)")
    step: int = Field(default=1, gt=0, le=LARGEST)

    _high = field_validator("high")(_not_below_low)
    _log = field_validator("log")(_log_needs_positive_low)

    @field_validator("step")
    @classmethod
    def _step(cls, step: int, info: ValidationInfo) -> int:
        if step != 1 and info.data.get("log"):
            raise _refuse("a log scale takes no step")
        return step


class Categorical(BaseModel):
    """A parameter drawn from a list of choices."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["categorical"]
    choices: list[str | int | float | bool | None] = Field(
        min_length=1, max_length=MAX_VALUES, description="numbers among them finite, within ±10^15"
    )

    @field_validator("choices")
    @classmethod
    def _numbers(cls, choices: list) -> list:
        for index, choice in enumerate(choices):
            number = isinstance(choice, (int, float)) and not isinstance(choice, bool)
            if number and not -LARGEST <= choice <= LARGEST:  # NaN compares false too
                raise _refuse("choice {index} is not a finite number within ±10^15", index=index)
        return choices


Distribution = Annotated[FloatRange | IntRange | Categorical, Field(discriminator="type")]


class Direction(str, Enum):
    """Whether the objective is to be made as large or as small as possible."""

    maximize = "maximize"
    minimize = "minimize"


class Objective(BaseModel):
    """The metric a trial is judged by (its last value) and which way is better."""

    model_config = ConfigDict(extra="forbid")

    metric: MetricName = Field(description="FIGURE/SERIES or SERIES, as kpl-helper pushes it")
    direction: Direction = Direction.maximize


class Budget(BaseModel):
    """When the search stops starting trials: after so many trials or so many seconds."""

    model_config = ConfigDict(extra="forbid")

    trials: int = Field(default=10, ge=1, le=10_000)
    seconds: float | None = Field(default=None, gt=0, description="wall time, stop and resume excluded")


class SamplerName(str, Enum):
    """Optuna's samplers offered."""

    random = "random"
    grid = "grid"
    tpe = "tpe"
    cmaes = "cmaes"


class Sampler(BaseModel):
    """How the next trial's parameters are chosen."""

    model_config = ConfigDict(extra="forbid")

    name: SamplerName = SamplerName.tpe
    seed: int | None = Field(default=None, ge=0, le=2**32 - 1, description="numpy's seeds are 32-bit")


class PrunerName(str, Enum):
    """Optuna's pruners offered."""

    median = "median"
    successive_halving = "successive_halving"
    hyperband = "hyperband"


class Pruner(BaseModel):
    """When a running trial is stopped early, from the objective's points it pushed so far."""

    model_config = ConfigDict(extra="forbid")

    name: PrunerName = PrunerName.median
    startup_trials: int = Field(
        default=2, ge=0, description="median: trials that complete before any is pruned"
    )
    warmup_steps: int = Field(
        default=1, ge=0, description="median: points a trial pushes before it may be pruned"
    )
    min_resource: int = Field(
        default=1, ge=1, description="successive halving, hyperband: points before the first rung"
    )
    reduction_factor: int = Field(default=3, ge=2, description="successive halving, hyperband")
    max_resource: int | None = Field(default=None, ge=1, description="hyperband: points of a full trial")


class ExperimentRequest(BaseModel):
    """A search: an algorithm function, its inputs, a space over parameter.yml keys and an objective."""

    model_config = ConfigDict(extra="forbid")

    name: Name
    algorithm: Ref = Field(description="NAME or NAME:VERSION (pinned to a version at creation)")
    function: str = "train"
    inputs: dict[str, InputRef] = Field(default_factory=dict)
    parameters: dict[str, Any] = Field(default_factory=dict, description="fixed parameters of every trial")
    space: dict[str, Distribution] = Field(min_length=1, description="parameter (dotted) -> range or choices")
    objective: Objective
    budget: Budget = Field(default_factory=Budget)
    parallelism: int = Field(default=1, ge=1, le=1000, description="trials queued or running at once")
    sampler: Sampler = Field(default_factory=Sampler)
    pruner: Pruner | None = None
    resources: ResourceRequest | None = None


class TrialState(str, Enum):
    """Where a trial is."""

    running = "running"  # its job is queued or running
    complete = "complete"
    pruned = "pruned"
    failed = "failed"
    stopped = "stopped"  # the experiment was stopped; a resume tries these parameters again


class Trial(Body):
    """One trial: the parameters chosen, its job and its objective value."""

    number: int
    state: TrialState
    job_id: str
    params: dict[str, Any]
    value: float | None = Field(
        description="the objective: the last value pushed (pruned: the last reported)"
    )
    reported: int = Field(description="objective points reported to the pruner")
    created: datetime | None
    finished: datetime | None


class ExperimentState(str, Enum):
    """Where an experiment is."""

    running = "running"
    stopped = "stopped"
    succeeded = "succeeded"
    failed = "failed"


class Experiment(Body):
    """An experiment with its trials and best trial."""

    name: str
    project: str
    algorithm: str = Field(description="NAME:VERSION")
    function: str
    inputs: dict[str, str]
    parameters: dict[str, Any]
    space: dict[str, dict[str, Any]]
    objective: dict[str, Any]
    budget: dict[str, Any]
    parallelism: int
    sampler: dict[str, Any]
    pruner: dict[str, Any] | None
    state: ExperimentState
    reason: str
    warnings: list[str] = Field(description="found when the space and objective were checked")
    trials: list[Trial]
    best_trial: int | None
    best_value: float | None
    best_params: dict[str, Any] | None
    best_job: str | None
    best_model: str | None = Field(description="model:NAME:VERSION the best trial registered")
    created: datetime | None
    finished: datetime | None
    searched_seconds: float = Field(description="time spent searching, the spells it was stopped left out")


class ExperimentList(Body):
    """The experiments of a project, newest first."""

    experiments: list[Experiment]


class PlotKind(str, Enum):
    """Optuna's visualisations of a study."""

    history = "history"
    importance = "importance"
    parallel = "parallel"


class Plot(Body):
    """A Plotly figure (render with plotly.io.from_json or Plotly.newPlot)."""

    data: list[dict[str, Any]]
    layout: dict[str, Any]


class ResumeExperimentRequest(BaseModel):
    """What a resume changes: a larger budget lets a finished experiment go on."""

    model_config = ConfigDict(extra="forbid")

    trials: int | None = Field(default=None, ge=1, le=10_000)
    seconds: float | None = Field(default=None, gt=0)
