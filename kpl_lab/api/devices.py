"""Devices: the machine's capacity, its accelerators and what is in use."""

from __future__ import annotations

from pydantic import Field

from .base import Body


class Held(Body):
    """CPUs, memory and device indexes."""

    cpu: float
    memory: int = Field(description="MB")
    devices: dict[str, list[int]] = Field(description="kind -> device indexes")


class Device(Body):
    """One accelerator and who holds it."""

    kind: str = Field(description="gpu or npu")
    index: int
    name: str
    memory_mb: int
    used_by: str | None = Field(
        description="job:ID or notebook:ID holding it in this project, 'other project' or null"
    )


class Devices(Body):
    """The machine's capacity, what all projects and this one hold, the quota and each device."""

    capacity: Held
    used: Held = Field(description="held by all projects")
    project_used: Held = Field(description="held by this project")
    quota: dict[str, float] | None = Field(
        description="this project's quota (cpu, memory MB, gpu, npu; a missing kind is unlimited), or null"
    )
    devices: list[Device]
