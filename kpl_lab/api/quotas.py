"""Quotas: what a project may hold at once, as the platform decides with it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from .base import Body


class _Limits(BaseModel):
    """A project's limits; a missing (null) one is not limited."""

    cpu: float | None = Field(default=None, ge=0, le=1e6, allow_inf_nan=False, description="CPUs")
    memory: float | None = Field(default=None, ge=0, le=1e12, allow_inf_nan=False, description="MB")
    gpu: float | None = Field(default=None, ge=0, le=1e6, allow_inf_nan=False)
    npu: float | None = Field(default=None, ge=0, le=1e6, allow_inf_nan=False)
    notebooks: float | None = Field(default=None, ge=0, le=1e6, allow_inf_nan=False)


class QuotaRequest(_Limits):
    """A project's new quota; a missing (null) limit is not limited."""

    model_config = ConfigDict(extra="forbid")


class QuotaLimits(_Limits, Body):
    """A project's limits; null: not limited."""


class Quota(Body):
    """A project's quota, read at each reservation of a job, notebook, trial or replica."""

    project: str
    quota: QuotaLimits
