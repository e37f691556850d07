"""MetricPlot: live metric curves of a job, one uPlot chart per figure."""

from __future__ import annotations

from html import escape
from typing import Protocol

import ipywidgets as widgets

from ..client import Client
from .chart import MetricChart
from .live import Poller
from .progress import FINAL_STATES

NO_METRICS = '<span style="color:#888">no metrics yet</span>'


class MetricSource(Protocol):
    """What MetricPlot reads: `kpl_lab.client.Client`, or a fake one in tests."""

    def job(self, job_id: str) -> dict: ...

    def metrics(self, job_id: str, max_points: int = ...) -> dict: ...


class MetricPlot(widgets.VBox):
    """The metric curves of a job, refreshed in the background while it runs."""

    def __init__(
        self,
        job_id: str,
        client: MetricSource | None = None,
        max_points: int = 500,
        interval: float = 2.0,
        height: int = 260,
        **kwargs,
    ) -> None:
        self.job_id = job_id
        self.client = client or Client()
        self.max_points = max_points
        self.height = height
        self.figures: dict[str, dict[str, list]] = {}
        self.charts: dict[str, MetricChart] = {}
        self.state = ""
        self.message = widgets.HTML(NO_METRICS)
        self.poller = Poller(self.refresh, interval)
        super().__init__([self.message], **kwargs)

    def refresh(self) -> bool:
        """Read the job's metrics once and show them; return whether the job has ended."""
        try:
            self.state = self.client.job(self.job_id)["state"]
            data = self.client.metrics(self.job_id, max_points=self.max_points)
            self.show(data["figures"], data.get("labels") or {})
        except Exception as error:  # shown in the cell: the background thread has no output of its own
            self._say(f'<span style="color:#c00">{escape(str(error))}</span>')
            raise
        return self.state in FINAL_STATES

    def show(self, figures: dict[str, dict[str, list]], labels: dict[str, dict] | None = None) -> MetricPlot:
        """Draw `{figure: {series: [[x, y], ...]}}`: a chart per figure, a line per series.

        `labels` names each figure's x axis (`{figure: {"x_name": "epoch"}}`); "step" when unnamed.
        """
        self.figures = figures
        for title, curves in figures.items():
            x_label = (labels or {}).get(title, {}).get("x_name") or "step"
            if title not in self.charts:
                self.charts[title] = MetricChart(title=title, x_label=x_label, height=self.height)
            self.charts[title].x_label = x_label
            self.charts[title].update(curves)
        self._say("" if figures else NO_METRICS)
        children = (self.message, *self.charts.values())
        if self.children != children:
            self.children = children
        return self

    def _say(self, text: str) -> None:
        self.message.value = text
        self.message.layout.display = "" if text else "none"

    def start(self) -> MetricPlot:
        """Keep refreshing in the background until the job ends."""
        self.poller.start()
        return self

    def stop(self) -> None:
        """Stop refreshing."""
        self.poller.stop()
