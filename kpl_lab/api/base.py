"""The base of every response body: every field is always present (null when unknown)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Body(BaseModel):
    """A JSON body the server answers."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=True)
