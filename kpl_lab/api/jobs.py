"""Jobs: what to run, the job as it runs, its logs, metrics and progress."""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from .base import Body, matching
from .catalog import MODEL_REF_PATTERN, Ref

# dataset:NAME[:VERSION], model:NAME[:VERSION|@ALIAS] or NAME[:VERSION|@ALIAS]
INPUT_PATTERN = r"^((dataset|model):)?" + MODEL_REF_PATTERN.removeprefix("^")
if TYPE_CHECKING:  # a checked string to type checkers
    InputRef = str
else:
    InputRef = matching(INPUT_PATTERN)
MAX_WORKER = 2**31 - 1  # the largest worker rank a request may name


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


class ResourceRequest(BaseModel):
    """Resource overrides of a job; null keeps the algorithm's environment.yml value."""

    model_config = ConfigDict(extra="forbid")

    cpu: float | None = Field(default=None, gt=0)
    memory: int | None = Field(default=None, gt=0, description="MB")
    shm: int | None = Field(default=None, ge=0, description="MB")
    gpu: int | None = Field(default=None, ge=0)
    npu: int | None = Field(default=None, ge=0)
    workers: int | None = Field(
        default=None, gt=0, description="distributed workers, each with the amounts above"
    )


class JobRequest(BaseModel):
    """What to run: one function of an algorithm with inputs, parameters and resources."""

    model_config = ConfigDict(extra="forbid")

    # from the query (?project=), never the body
    project: SkipJsonSchema[str] = "default"
    algorithm: Ref = Field(description="NAME or NAME:VERSION")
    function: str = "train"
    inputs: dict[str, InputRef] = Field(
        default_factory=dict, description="input key -> dataset:NAME[:VERSION], model:NAME[:VERSION] or NAME"
    )
    parameters: dict[str, Any] = Field(
        default_factory=dict,
        description="parameter name (dotted or nested) -> value, checked against parameter.yml",
    )
    resources: ResourceRequest | None = None
    priority: int = 0


class CopyRequest(BaseModel):
    """What a copy changes."""

    model_config = ConfigDict(extra="forbid")

    parameters: dict[str, Any] | None = None
    resources: ResourceRequest | None = None


class ResumeRequest(BaseModel):
    """What a resumed run changes."""

    model_config = ConfigDict(extra="forbid")

    parameters: dict[str, Any] | None = None


class JobInput(Body):
    """An input as asked and as resolved."""

    ref: str = Field(description="what was asked, e.g. dataset:digits")
    kind: str = Field(description="dataset or model")
    version_id: int
    version: str = Field(description="NAME:VERSION it resolved to")


class JobOutput(Body):
    """An output and the catalog version it was registered as."""

    name: str = Field(description="catalog name")
    registered: str | None = Field(description="dataset:NAME:VER or model:NAME:VER once registered")


class JobResources(Body):
    """Resources of a job: cpu, memory and shm (MB), device counts by kind."""

    cpu: float
    memory: int
    shm: int | None
    devices: dict[str, int]


class QueueHolder(Body):
    """A job or notebook holding what a queued job needs (other projects' stay anonymous)."""

    kind: str = Field(description="job or notebook")
    id: str | None = Field(description="job id or USER/SERVER of a notebook; null for another project's")
    user: str | None = Field(description="the notebook's user; null for jobs and other projects")
    project: str | None = Field(description="null for another project's")
    cpu: float
    memory: int = Field(description="MB")
    devices: dict[str, int] = Field(description="kind -> devices held")


class QueueReason(Body):
    """Why a queued job waits: what it lacks, what holds it, and its place in the queue."""

    position: int = Field(description="place in the machine's queue, 1 first")
    queued: int = Field(description="queued jobs on the machine")
    limit: str = Field(
        description="machine (not free on this machine), quota (the project's quota is in use), "
        "behind (an earlier job of the project waits first) or none (it fits: starts at the next pass)"
    )
    waits_for: list[str] = Field(description="the resources it lacks: cpu, memory, gpu, npu")
    behind: str | None = Field(description="the earlier queued job of its project it waits behind")
    held_by: list[QueueHolder]
    message: str = Field(description="all of it as one sentence")


class Job(Body):
    """A job with its progress and the seconds left."""

    id: str
    project: str
    algorithm: str = Field(description="NAME:VERSION")
    function: str
    state: JobState
    progress: float = Field(ge=0, le=1, description="fraction done")
    eta_seconds: float | None = Field(description="seconds left, null when unknown")
    inputs: dict[str, JobInput]
    parameters: dict[str, Any]
    outputs: dict[str, JobOutput]
    saves: list[dict[str, Any]] = Field(description="the save events of the job (kpl-helper)")
    results: list[dict[str, Any]] = Field(description="the result events of the job (kpl-helper)")
    figures: list[str] = Field(description="titles of the metric figures")
    limits: JobResources
    requests: JobResources | None
    assigned_devices: dict[str, list[int]] = Field(description="kind -> device indexes held")
    executor: str
    enforcement: str = Field(description="how the limits are enforced")
    exit_code: int | None
    reason: str
    queue: QueueReason | None = Field(description="why a queued job waits; null once it runs")
    last_log_lines: str = Field(description="the end of output.log once the job has ended")
    created: datetime | None
    started: datetime | None
    finished: datetime | None
    copied_from: str | None
    resumed_from: str | None
    experiment: str | None = Field(description="the experiment this job is a trial of")
    trial: int | None = Field(description="its trial number in that experiment")


class JobList(Body):
    """The jobs of a project, newest first."""

    jobs: list[Job]


class LogChunk(Body):
    """A chunk of output.log."""

    text: str = Field(
        description="UTF-8 text from offset (a multi-byte character cut at the end is left for the next chunk)"
    )
    offset: int
    next_offset: int
    size: int = Field(description="bytes of output.log now")
    done: bool = Field(description="the job has ended and next_offset is the end of the log")
    state: JobState


class FigureLabels(Body):
    """The axis names of a figure."""

    x_name: str | None
    y1_name: str | None
    y2_name: str | None


class Metrics(Body):
    """Metric points grouped by figure, then by series."""

    max_points: int = Field(description="points per series at most")
    figures: dict[str, dict[str, list[tuple[float, float]]]] = Field(
        description="figure -> series -> [[x, value], ...]"
    )
    labels: dict[str, FigureLabels] = Field(description="figure -> its axis names")


class Progress(Body):
    """The fraction done and the seconds left (and why it waits, while queued)."""

    state: JobState
    progress: float = Field(ge=0, le=1, description="fraction done")
    eta_seconds: float | None = Field(description="seconds left, null when unknown")
    queue: QueueReason | None = Field(description="why a queued job waits; null once it runs")


class EventsAccepted(Body):
    """How many events were taken in."""

    accepted: int
