"""The server itself: its name and version."""

from __future__ import annotations

from typing import Literal

from .base import Body


class ServerVersion(Body):
    """The product name and version of the running server."""

    name: Literal["kpl-lab"]
    version: str
