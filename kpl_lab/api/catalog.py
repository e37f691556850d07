"""What datasets, models and algorithms share: versions, lineage, deletion."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from .base import Body


class CatalogVersion(Body):
    """Fields shared by dataset, model and algorithm versions."""

    name: str
    version: str
    ref: str = Field(description="NAME:VERSION")
    description: str
    size_bytes: int
    lineage: dict[str, Any] | None = Field(
        description="the job that made it: job_id, algorithm, function, inputs, parameters"
    )
    created: datetime | None


class Deleted(Body):
    """What a delete removed."""

    deleted: list[str] = Field(description="NAME:VERSION of every version deleted")
