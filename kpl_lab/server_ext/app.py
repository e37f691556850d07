"""The KPL Lab jupyter-server extension app."""

from jupyter_server.extension.application import ExtensionApp

from .version import VersionHandler

API_PREFIX = "/kpl/api"


class KPLLab(ExtensionApp):
    """Serve the KPL Lab REST API inside a Jupyter server."""

    name = "kpl_lab"
    description = "KPL Lab REST API: datasets, algorithms, jobs, pipelines, models"
    load_other_extensions = True

    def initialize_handlers(self) -> None:
        """Register the REST API handlers under /kpl/api/."""
        self.handlers.extend([(rf"{API_PREFIX}/version", VersionHandler)])
