"""GET /kpl/api/version: the name and version of the running KPL Lab server."""

import json

from jupyter_server.base.handlers import APIHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from tornado import web

from .._version import __version__


class VersionHandler(ExtensionHandlerMixin, APIHandler):
    """Answer the server's product name and version."""

    @web.authenticated
    def get(self) -> None:
        """Answer `{"name": "kpl-lab", "version": ...}`."""
        self.finish(json.dumps({"name": "kpl-lab", "version": __version__}))
