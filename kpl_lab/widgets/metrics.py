"""MetricPlot: live metric curves of a job, drawn as inline SVG, one chart per figure."""

from __future__ import annotations

from html import escape

import ipywidgets as widgets

from ..api.jobs import FINAL_STATES
from ..client import Client
from .live import Poller
from .svgplot import render_svg


class MetricPlot(widgets.VBox):
    """The metric curves of a job, refreshed in the background while it runs."""

    def __init__(
        self,
        job_id: str,
        client: Client | None = None,
        max_points: int = 500,
        interval: float = 2.0,
        width: int = 560,
        height: int = 280,
        **kwargs,
    ) -> None:
        self.job_id = job_id
        self.client = client or Client()
        self.max_points = max_points
        self.size = (width, height)
        self.figures: dict[str, dict[str, list]] = {}  # figure -> series -> points
        self.state = ""
        self.chart = widgets.HTML(value=render_svg({}, width=width, height=height))
        self.poller = Poller(self.refresh, interval)
        super().__init__([self.chart], **kwargs)

    def refresh(self) -> bool:
        """Read the job's metrics once and redraw; return whether the job has ended."""
        try:
            self.state = self.client.job(self.job_id)["state"]
            data = self.client.metrics(self.job_id, max_points=self.max_points)
        except Exception as error:
            self.chart.value = f'<span style="color:#c00">{escape(str(error))}</span>'
            raise
        self.figures = data["figures"]
        labels = data.get("labels") or {}
        width, height = self.size
        self.chart.value = "".join(
            render_svg(curves, title, width, height, labels.get(title, {}).get("x_name") or "step")
            for title, curves in self.figures.items()
        ) or render_svg({}, width=width, height=height)
        return self.state in FINAL_STATES

    def start(self) -> MetricPlot:
        """Keep redrawing in the background until the job ends."""
        self.poller.start()
        return self

    def stop(self) -> None:
        """Stop redrawing."""
        self.poller.stop()
