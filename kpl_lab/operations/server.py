"""The server itself: its product name and version."""

from __future__ import annotations

from .._version import __version__
from ..api.server import ServerVersion
from .caller import Caller


def version(caller: Caller) -> ServerVersion:
    """Answer the product's name and version."""
    return ServerVersion(name="kpl-lab", version=__version__)
