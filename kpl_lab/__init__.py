"""KPL Lab: a one-stop AI development workbench inside JupyterLab."""

from ._version import __version__

__all__ = ["__version__"]
