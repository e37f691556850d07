"""JobMonitor: what a submitted job shows in its cell: a title, a live progress bar and curves."""

from __future__ import annotations

from html import escape

import ipywidgets as widgets

from ..client import Client
from .metrics import MetricPlot
from .progress import JobProgress


class JobMonitor(widgets.VBox):
    """A job's progress bar and metric curves, refreshed in the background while it runs."""

    def __init__(self, job: dict, client: Client | None = None, **kwargs) -> None:
        self.client = client or Client()
        self.job_id = job["id"]
        title = widgets.HTML(
            f"<b>job {escape(self.job_id)}</b>: {escape(job.get('algorithm', ''))} {escape(job.get('function', ''))}"
        )
        self.progress = JobProgress(self.job_id, self.client)
        self.plot = MetricPlot(self.job_id, self.client)
        super().__init__([title, self.progress, self.plot], **kwargs)

    def refresh(self) -> bool:
        """Refresh both once; return whether the job has ended."""
        done = self.progress.refresh()
        self.plot.refresh()
        return done

    def start(self) -> JobMonitor:
        """Keep both refreshing in the background until the job ends."""
        self.progress.start()
        self.plot.start()
        return self

    def stop(self) -> None:
        """Stop refreshing."""
        self.progress.stop()
        self.plot.stop()
