"""JobProgress: a live progress bar of a job with its state and time left."""

from __future__ import annotations

from html import escape

import ipywidgets as widgets

from ...api.choices import FINAL_STATES
from ...text import human_duration
from ..client import Client
from .live import Poller

BAR_STYLES = {"succeeded": "success", "failed": "danger", "lost": "danger", "stopped": "warning"}


def progress_text(job_id: str, state: str, fraction: float, eta: float | None, waits: str = "") -> str:
    """Return `job abc running 42% · 1m 05s left` (or why a queued job waits)."""
    text = f"job {job_id} {state} {fraction * 100:.0f}%"
    if state == "running" and eta is not None:
        text += f" · {human_duration(eta)} left"
    if state == "queued" and waits:
        text += f" · {waits}"
    return text


class JobProgress(widgets.VBox):
    """A progress bar with the job's state and time left, refreshed in the background."""

    def __init__(self, job_id: str, client: Client | None = None, interval: float = 1.0, **kwargs) -> None:
        self.job_id = job_id
        self.client = client or Client()
        self.state = ""
        self.fraction = 0.0
        self.eta_seconds: float | None = None
        self.bar = widgets.FloatProgress(value=0.0, min=0.0, max=1.0, layout=widgets.Layout(width="60%"))
        self.label = widgets.HTML()
        self.poller = Poller(self.refresh, interval)
        super().__init__([widgets.HBox([self.bar, self.label])], **kwargs)

    @property
    def done(self) -> bool:
        """Return whether the job has ended."""
        return self.state in FINAL_STATES

    def refresh(self) -> bool:
        """Read the job's progress once and show it; return whether the job has ended."""
        try:
            data = self.client.progress(self.job_id)
        except Exception as error:
            self.label.value = f'<span style="color:#c00">{escape(str(error))}</span>'
            raise
        self.state = data["state"]
        self.fraction = float(data.get("progress") or 0.0)
        self.eta_seconds = data.get("eta_seconds")
        self.bar.value = self.fraction
        self.bar.bar_style = BAR_STYLES.get(self.state, "info")
        waits = (data.get("queue") or {}).get("message", "")
        self.label.value = escape(
            progress_text(self.job_id, self.state, self.fraction, self.eta_seconds, waits)
        )
        return self.done

    def start(self) -> JobProgress:
        """Keep refreshing in the background until the job ends."""
        self.poller.start()
        return self

    def stop(self) -> None:
        """Stop refreshing."""
        self.poller.stop()
