"""Notebook profiles: the flavours of notebook a user may start, as administrators set them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .base import Body


@dataclass(frozen=True)
class Profile:
    """One notebook flavour a user may pick; memory and shm in MB."""

    slug: str
    display_name: str = ""
    description: str = ""
    environment: str = ""  # local: a Python executable or venv folder; Kubernetes: an image
    cpu: float = 1.0
    cpu_max: float = 1.0
    memory: int = 2048
    memory_max: int = 2048
    shm: int = 64
    shm_max: int = 64
    accelerator: str = ""  # "gpu", "npu" or "" for none
    accelerators: int = 0
    accelerators_max: int = 0
    projects: tuple[str, ...] = ()  # group names that may use it; empty: every project
    gpu_sharing: bool = False  # several notebooks on one accelerator
    default: bool = False
    node_selector: dict = field(default_factory=dict)  # Kubernetes only
    tolerations: tuple[dict, ...] = ()  # Kubernetes only

    @property
    def title(self) -> str:
        """Return the name shown to people."""
        return self.display_name or self.slug

    def allows(self, project: str) -> bool:
        """Return whether a notebook of `project` may use this profile."""
        return not self.projects or project in self.projects


class ProfilesRequest(BaseModel):
    """The new profiles, replacing every one (the fields of `c.KPLSpawner.profiles`' entries)."""

    model_config = ConfigDict(extra="forbid")

    profiles: list[dict[str, Any]] = Field(max_length=200)


class Profiles(Body):
    """The notebook profiles every next spawn form and spawn decides with."""

    profiles: list[Profile]
