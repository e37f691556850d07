"""JobProgress, MetricPlot and JobMonitor refreshed from a real job on a running server."""

from __future__ import annotations

import pytest

from kpl_lab.errors import NotFound
from kpl_lab.notebook.widgets.progress import progress_text
from kpl_lab.widgets import JobMonitor, JobProgress, MetricPlot


def test_progress_and_plot_follow_a_job_to_its_end(kpl_server, kpl_data):
    client = kpl_server.client()
    job = client.submit("toy", inputs={"data": "shapes"}, parameters={"steps": 20, "pause": 0.05})
    progress = JobProgress(job["id"], client, interval=0.1)
    plot = MetricPlot(job["id"], client, interval=0.1)
    fractions: list[float] = []
    progress.bar.observe(lambda change: fractions.append(change["new"]), names="value")
    progress.start()
    plot.start()
    progress.poller.join()
    plot.poller.join()
    assert progress.poller.error is None and plot.poller.error is None
    assert progress.state == "succeeded" and progress.done
    assert progress.bar.value == 1.0 and progress.bar.bar_style == "success"
    assert f"job {job['id']} succeeded 100%" in progress.label.value
    assert fractions == sorted(fractions)  # never goes back
    assert [x for x, _ in plot.figures["training"]["loss"]] == list(range(20))
    chart = plot.charts["training"]
    assert sorted(chart.series) == ["accuracy", "loss"] and chart.data[0] == list(range(20))


def test_monitor_refreshes_both(kpl_server, kpl_data, wait_job_end):
    client = kpl_server.client()
    job = client.submit("toy", inputs={"data": "shapes"}, parameters={"steps": 2})
    wait_job_end(client, job["id"])
    monitor = JobMonitor(job, client)
    assert monitor.refresh() is True
    assert monitor.progress.state == "succeeded" and len(monitor.plot.figures["training"]["loss"]) == 2
    assert job["id"] in monitor.children[0].value


def test_an_unknown_job_shows_the_error_and_stops(kpl_server):
    progress = JobProgress("nosuchjob", kpl_server.client())
    with pytest.raises(NotFound):
        progress.refresh()
    assert "not found" in progress.label.value
    progress.start()
    progress.poller.join()
    assert isinstance(progress.poller.error, NotFound) and not progress.poller.running
    plot = MetricPlot("nosuchjob", kpl_server.client())
    with pytest.raises(NotFound):
        plot.refresh()
    assert "not found" in plot.message.value


def test_stop_ends_the_background_refresh(kpl_server, kpl_data, wait_job_end):
    client = kpl_server.client()
    job = client.submit("toy", inputs={"data": "shapes"}, parameters={"steps": 1000, "pause": 0.1})
    plot = MetricPlot(job["id"], client, interval=0.1).start()
    plot.stop()
    assert not plot.poller.running and plot.state in ("queued", "running", "")
    client.stop(job["id"])
    assert wait_job_end(client, job["id"])["state"] == "stopped"


def test_progress_text_names_time_left_only_while_running():
    assert progress_text("j1", "running", 0.42, 65) == "job j1 running 42% · 1m05s left"
    assert progress_text("j1", "queued", 0.0, None) == "job j1 queued 0%"
    assert progress_text("j1", "succeeded", 1.0, 0.0) == "job j1 succeeded 100%"
