"""Resource use: samples of a running job, with one vocabulary for every reader."""

from __future__ import annotations

from pydantic import Field

from .base import Body


class GpuSample(Body):
    """One GPU as a job's sample sees it."""

    index: int
    utilization_percent: float = Field(description="busy time of the GPU over the last sample period")
    memory_mb: float = Field(description="memory used on the GPU by every process")
    job_memory_mb: float = Field(description="memory used on the GPU by the job's processes")


class UsageSample(Body):
    """The job's use at one moment."""

    time: float = Field(description="Unix time")
    cpu_percent: float | None = Field(description="100 per busy CPU; null on the first sample")
    memory_mb: float = Field(description="resident memory of the job's processes")
    peak_memory_mb: float
    processes: int
    gpus: list[GpuSample] | None = Field(
        default=None, description="the job's GPUs; null without a GPU driver"
    )


class JobUsage(Body):
    """A job's resource use: the latest sample, the peak memory and the recent samples."""

    latest: UsageSample | None = Field(description="null before the first sample")
    peak_memory_mb: float | None
    history: list[UsageSample] = Field(description="the last samples, oldest first")
