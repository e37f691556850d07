"""Models: versions with their files and lineage."""

from __future__ import annotations

from datetime import datetime

from .base import Body
from .catalog import CatalogVersion


class ModelVersion(CatalogVersion):
    """A model version: its files."""

    files: list[str]


class Model(Body):
    """A model with its versions, oldest first."""

    name: str
    description: str
    created: datetime | None
    versions: list[ModelVersion]


class ModelList(Body):
    """The models of a project."""

    models: list[Model]
