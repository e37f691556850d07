"""KPL Lab: a one-stop AI development workbench inside JupyterLab."""

from ._version import __version__

__all__ = ["__version__"]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """Name the prebuilt JupyterLab extension shipped in this package."""
    return [{"src": "labextension", "dest": "kpl-lab"}]


def _jupyter_server_extension_points() -> list[dict[str, object]]:
    """Name the jupyter-server extension app hosting the KPL Lab REST API."""
    # Imported here so that `import kpl_lab` in a kernel does not load jupyter_server.
    import os

    if os.environ.get("KPL_SERVICE_URL"):
        # Under the KPL hub the platform runs once, as the hub service: forward to it.
        from .server_ext.forward import ForwardApp as app
    else:
        from .server_ext import KPLLab as app
    return [{"module": "kpl_lab", "app": app}]


def load_ipython_extension(ipython) -> None:
    """Register the %kpl_* magics: `%load_ext kpl_lab`."""
    from .notebook.magics import KPLMagics

    ipython.register_magics(KPLMagics(ipython))
