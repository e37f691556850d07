"""MetricChart and MetricPlot driven by a fake client: what the browser is sent, and the front end's module."""

from __future__ import annotations

import math
import re

import pytest

from kpl_lab import charts
from kpl_lab.errors import NotFound
from kpl_lab.notebook.widgets.chart import align, module
from kpl_lab.widgets import MetricChart, MetricPlot


class FakeClient:
    """Answers a job's state and metrics from what the test wrote, as `Client` does."""

    def __init__(self) -> None:
        self.state = "running"
        self.figures: dict[str, dict[str, list]] = {}
        self.asked: list[tuple[str, int]] = []

    def job(self, job_id: str) -> dict:
        if job_id != "j1":
            raise NotFound(f"job {job_id} not found")
        return {"id": job_id, "state": self.state}

    def metrics(self, job_id: str, max_points: int = 1000) -> dict:
        self.asked.append((job_id, max_points))
        figures = {f: {s: list(p) for s, p in c.items()} for f, c in self.figures.items()}
        return {"figures": figures, "labels": {"validation": {"x_name": "epoch"}}}


def record(chart: MetricChart) -> list[dict]:
    """Return the list that collects the messages and state updates the chart sends to the browser."""
    sent: list[dict] = []
    chart.comm.send = lambda data=None, buffers=None, **_: sent.append(data)
    return sent


def test_series_are_aligned_on_one_x_column_with_gaps():
    assert align({"loss": [[0, 1.0], [2, 0.5]], "accuracy": [[1, 0.1], [2, 0.2]]}) == [
        [0.0, 1.0, 2.0],
        [1.0, None, 0.5],
        [None, 0.1, 0.2],
    ]
    assert align({"loss": [[0, math.nan], [1, math.inf]]}) == [[0.0, 1.0], [None, None]]
    assert align({}) == [[]]


def test_new_points_are_appended_without_resending_the_chart():
    chart = MetricChart(title="training")
    sent = record(chart)
    chart.update({"loss": [[0, 1.0]], "accuracy": [[0, 0.0]]})
    assert chart.series == ["loss", "accuracy"]
    assert chart.data == [[0.0], [1.0], [0.0]]
    (reset,) = sent
    assert reset["method"] == "update" and reset["state"]["series"] == ["loss", "accuracy"]
    sent.clear()

    chart.update({"loss": [[0, 1.0], [1, 0.5], [2, 0.25]], "accuracy": [[0, 0.0], [1, 0.5], [2, 1.0]]})
    assert sent == [
        {"method": "custom", "content": {"type": "append", "rows": [[1.0, 0.5, 0.5], [2.0, 0.25, 1.0]]}}
    ]
    # the whole columns are there for a browser that reloads the page
    assert chart.get_state()["data"] == [[0.0, 1.0, 2.0], [1.0, 0.5, 0.25], [0.0, 0.5, 1.0]]
    sent.clear()

    chart.update({"loss": [[0, 1.0], [1, 0.5], [2, 0.25]], "accuracy": [[0, 0.0], [1, 0.5], [2, 1.0]]})
    assert sent == []  # nothing new, nothing sent


def test_changed_points_or_a_new_series_reset_the_chart():
    chart = MetricChart()
    chart.update({"loss": [[0, 1.0], [1, 0.5]]})
    sent = record(chart)
    chart.update({"loss": [[0, 1.0], [2, 0.3]]})  # thinned to max_points: not a prefix any more
    assert [m["method"] for m in sent] == ["update"]
    assert sent[0]["state"]["data"] == [[0.0, 2.0], [1.0, 0.3]]
    sent.clear()
    chart.update({"loss": [[0, 1.0], [2, 0.3]], "lr": [[0, 0.1]]})
    assert sent[0]["state"] == {"series": ["loss", "lr"], "data": [[0.0, 2.0], [1.0, 0.3], [0.1, None]]}


def test_plot_draws_a_chart_per_figure_and_extends_them_live():
    client = FakeClient()
    plot = MetricPlot("j1", client, max_points=50)
    assert plot.refresh() is False
    assert client.asked == [("j1", 50)]
    assert plot.charts == {} and "no metrics yet" in plot.message.value

    client.figures = {
        "training": {"loss": [[0, 1.0]], "accuracy": [[0, 0.0]]},
        "validation": {"loss": [[0, 2.0]]},
    }
    plot.refresh()
    training, validation = plot.charts["training"], plot.charts["validation"]
    assert plot.children == (plot.message, training, validation)
    assert plot.message.layout.display == "none"
    assert (training.title, training.series, validation.series) == (
        "training",
        ["loss", "accuracy"],
        ["loss"],
    )
    assert (training.x_label, validation.x_label) == ("step", "epoch")
    sent = record(training)

    client.figures["training"] = {"loss": [[0, 1.0], [1, 0.5]], "accuracy": [[0, 0.0], [1, 0.5]]}
    client.state = "succeeded"
    assert plot.refresh() is True
    assert plot.charts["training"] is training  # the same chart, extended
    assert sent == [{"method": "custom", "content": {"type": "append", "rows": [[1.0, 0.5, 0.5]]}}]
    assert plot.figures["training"]["loss"] == [[0, 1.0], [1, 0.5]]


def test_plot_shows_the_error_and_stops_refreshing():
    plot = MetricPlot("nosuchjob", FakeClient(), interval=0.01)
    with pytest.raises(NotFound):
        plot.refresh()
    assert "nosuchjob not found" in plot.message.value and plot.message.layout.display == ""
    plot.start()
    plot.poller.join()
    assert isinstance(plot.poller.error, NotFound) and not plot.poller.running


def test_the_front_end_is_one_self_contained_module():
    source = module()
    assert source.startswith(charts.asset(charts.UPLOT_SCRIPT))  # uPlot declared in the module itself
    assert "var uPlot=" in source and "new uPlot(" in source
    assert len(re.findall(r"^export default\b", source, re.M)) == 1
    # no import of anything: neither a bare name (there is no bundler) nor a URL (no internet)
    assert not re.search(
        r"\bimport\s*[\w{*\s,}]*\s*from\s*['\"]|\bimport\s*\(|^\s*import\s+['\"]", source, re.M
    )
    assert not re.search(r"https?://", source.split("\n", 1)[1])  # past uPlot's licence line
    assert ".u-legend" in MetricChart().get_state()["_css"]


def test_a_missing_build_says_how_to_make_it(monkeypatch, tmp_path):
    monkeypatch.setattr(charts, "STATIC", tmp_path)
    charts.asset.cache_clear()
    module.cache_clear()
    client = FakeClient()
    client.figures = {"training": {"loss": [[0, 1.0]]}}
    plot = MetricPlot("j1", client)
    try:
        with pytest.raises(FileNotFoundError, match=r"uPlot\.iife\.min\.js is missing: .*jlpm build:static"):
            plot.refresh()
    finally:
        charts.asset.cache_clear()
        module.cache_clear()
    assert "uPlot.iife.min.js is missing" in plot.message.value
