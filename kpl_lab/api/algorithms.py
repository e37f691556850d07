"""Algorithms: versions with their functions, resources, ports and parameter schema."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from .base import Body
from .catalog import CatalogVersion


class AlgorithmVersion(CatalogVersion):
    """An algorithm version: its functions and parameter.yml defaults."""

    functions: list[str]
    parameters: dict[str, Any] = Field(description="parameter.yml defaults")


class Port(Body):
    """An output of a function."""

    key: str
    name: str


class InputPort(Port):
    """An input of a function."""

    optional: bool = Field(False, description="a job may go without it (environment.yml `optional: true`)")


class ResourceAmounts(Body):
    """Amounts of each resource; null when not set."""

    cpu: float | None
    memory: int | None = Field(description="MB")
    shm: int | None = Field(description="MB")
    gpu: int | None
    npu: int | None


class FunctionResource(Body):
    """The limits a function runs under, and the requests it is scheduled by."""

    limits: ResourceAmounts
    requests: ResourceAmounts | None
    workers: int = Field(1, description="distributed workers, each with the limits above")


class FunctionSpec(Body):
    """One function of an algorithm."""

    cmd: str
    resource: FunctionResource
    inputs: list[InputPort]
    outputs: list[Port]


class ImageSpec(Body):
    """The image the algorithm runs in."""

    from_image: str | None
    runs: list[str]
    used: bool = Field(
        False,
        description="jobs here run in from_image (the Kubernetes executor); locally `runs` build a "
        "virtual environment and from_image is not used",
    )


class AlgorithmVersionDetail(AlgorithmVersion):
    """An algorithm version in full, with the JSON Schema of its parameters (for a form)."""

    image: ImageSpec
    function_specs: dict[str, FunctionSpec]
    parameter_descriptions: dict[str, str]
    parameter_schema: dict[str, Any] = Field(description="JSON Schema of the parameters")


class Algorithm(Body):
    """An algorithm with its versions, oldest first."""

    name: str
    description: str
    created: datetime | None
    versions: list[AlgorithmVersion]


class AlgorithmList(Body):
    """The algorithms of a project."""

    algorithms: list[Algorithm]
