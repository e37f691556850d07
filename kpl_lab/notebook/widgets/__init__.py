"""ipywidgets of KPL Lab: dataset preview, live job progress, metric curves, pipeline builder.

They talk to the REST API through `kpl_lab.client.Client`, so they work in any kernel of a
KPL Lab JupyterLab, and in plain Python (drive them with `refresh()` / `next_page()`). The
metric charts are drawn by uPlot, as in the job view, through anywidget.
"""

from .chart import MetricChart
from .dataset import DatasetPreview
from .metrics import MetricPlot
from .monitor import JobMonitor
from .pipeline import PipelineBuilder
from .progress import JobProgress

__all__ = ["DatasetPreview", "JobMonitor", "JobProgress", "MetricChart", "MetricPlot", "PipelineBuilder"]
