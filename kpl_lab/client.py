"""`from kpl_lab.client import Client`: the REST client, kept in `kpl_lab.notebook.client`."""

from .notebook.client import Client, discover, service_configured

__all__ = ["Client", "discover", "service_configured"]
