"""The jupyter-server extension that hosts the KPL Lab REST API under /kpl/api/."""

from .app import KPLLab

__all__ = ["KPLLab"]
