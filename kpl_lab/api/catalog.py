"""What datasets, models and algorithms share: versions, lineage, deletion."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from .base import Body, matching

# a name of a project, dataset, model, algorithm or version: one safe path component, in ASCII
# spelled out: every regex engine reads it alike (`\w` is ASCII in the JSON Schema (ECMA-262)
# reading of the document and Unicode in Python's, and Unicode classes differ between engines)
_NAME = r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,99}"
NAME_PATTERN = rf"^{_NAME}$"
NAME_SCHEMA = {"type": "string", "pattern": NAME_PATTERN, "minLength": 1, "maxLength": 100}
# NAME or NAME:VERSION
REF_PATTERN = rf"^{_NAME}(:{_NAME})?$"
# a model also answers to NAME@ALIAS (production, canary, ...)
MODEL_REF_PATTERN = rf"^{_NAME}([:@]{_NAME})?$"
Name = matching(NAME_PATTERN)
Ref = matching(REF_PATTERN)
ModelRef = matching(MODEL_REF_PATTERN)


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
