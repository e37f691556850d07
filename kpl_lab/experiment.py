"""`from kpl_lab.experiment import Experiment`: the experiment SDK, kept in `kpl_lab.notebook.experiment`."""

from .notebook.experiment import Experiment

__all__ = ["Experiment"]
