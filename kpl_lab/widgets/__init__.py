"""`from kpl_lab.widgets import ...`: the notebook widgets, kept in `kpl_lab.notebook.widgets`."""

from ..notebook.widgets import (
    DatasetPreview,
    JobMonitor,
    JobProgress,
    MetricChart,
    MetricPlot,
    PipelineBuilder,
)

__all__ = ["DatasetPreview", "JobMonitor", "JobProgress", "MetricChart", "MetricPlot", "PipelineBuilder"]
