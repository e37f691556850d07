"""GET /kpl/api/version: the name and version of the running KPL Lab server."""

from tornado import web

from .._version import __version__
from ..api.server import ServerVersion
from .base import KPLHandler


class VersionHandler(KPLHandler):
    """Answer the server's product name and version."""

    @web.authenticated
    def get(self) -> None:
        """Answer `{"name": "kpl-lab", "version": ...}`."""
        self.reply(ServerVersion(name="kpl-lab", version=__version__))
