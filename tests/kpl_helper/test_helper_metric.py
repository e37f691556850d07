"""MetricFigure and push_metric: validation, events, buffering and the flush at exit."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest
import torch

from kpl_helper import done, events, metric


def test_outside_works_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    figure = metric.MetricFigure("title", y1_name="loss")
    for no in range(1, 100):
        figure.push_metric(x=no, y1=10.0 / no)
    assert list(tmp_path.iterdir()) == []


def test_figure_and_points_inside_a_job(job):
    figure = metric.MetricFigure("train", y1_name="loss", y2_name="acc", y2_type="scatter", x_name="epoch")
    figure.push_metric(1, 0.5, 0.9)
    figure.push_metric(x=2, y1=0.25)
    found = job.events()
    assert found[0] == {
        "type": "figure",
        "time": found[0]["time"],
        "title": "train",
        "x_name": "epoch",
        "y1_name": "loss",
        "y1_type": "line",
        "y2_name": "acc",
        "y2_type": "scatter",
    }
    assert [(e["type"], e["x"], e["values"]) for e in found[1:]] == [
        ("metric", 1, {"loss": 0.5, "acc": 0.9}),
        ("metric", 2, {"loss": 0.25}),
    ]
    assert found[1]["title"] == "train"


def test_numpy_and_torch_scalars(job):
    figure = metric.MetricFigure("t", y1_name="loss", y2_name="acc")
    figure.push_metric(np.int64(3), np.float32(0.5), torch.tensor(0.25))
    figure.push_metric(torch.tensor(4), 1, True)
    figure.push_metric(2.5, torch.tensor([0.125]), None)
    points = [(e["x"], e["values"]) for e in job.events()[1:]]
    assert points == [(3, {"loss": 0.5, "acc": 0.25}), (4, {"loss": 1.0, "acc": 1.0}), (2.5, {"loss": 0.125})]
    assert isinstance(points[0][0], int)


@pytest.mark.parametrize("bad", ["0.5", b"1", None, [1, 2], {"a": 1}, object()])
def test_values_must_be_numbers(bad):
    figure = metric.MetricFigure("t", y1_name="loss", y2_name="acc")
    with pytest.raises(TypeError, match="loss must be a number"):
        figure.push_metric(1, bad)


def test_y2_needs_a_y2_name():
    figure = metric.MetricFigure("t", y1_name="loss")
    with pytest.raises(ValueError, match="has no y2_name"):
        figure.push_metric(1, 0.5, 0.7)


def test_x_must_be_a_number():
    with pytest.raises(TypeError, match="metric x must be a number"):
        metric.MetricFigure("t", y1_name="loss").push_metric("first", 0.5)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"title": "", "y1_name": "loss"}, "title"),
        ({"title": "t", "y1_name": None}, "y1_name"),
        ({"title": "t", "y1_name": "loss", "y2_name": "loss"}, "both 'loss'"),
        ({"title": "t", "y1_name": "loss", "x_name": 3}, "x_name"),
    ],
)
def test_figure_arguments_are_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        metric.MetricFigure(**kwargs)


def test_non_finite_values_are_null_with_raw(job):
    figure = metric.MetricFigure("t", y1_name="loss", y2_name="acc")
    figure.push_metric(1, float("nan"), float("inf"))
    figure.push_metric(float("-inf"), 1.0)
    job.events()  # flush
    lines = job.events_file.read_text().splitlines()
    first, second = (json.loads(line) for line in lines[1:])
    assert first["values"] == {"loss": None, "acc": None}
    assert first["raw"] == {"values.loss": "nan", "values.acc": "inf"}
    assert second["x"] is None
    assert second["raw"] == {"x": "-inf"}
    for line in lines:
        json.loads(line, parse_constant=lambda name: pytest.fail(f"invalid JSON constant {name}"))


def test_background_thread_flushes_without_any_call(job):
    figure = metric.MetricFigure("t", y1_name="loss")
    figure.push_metric(1, 0.5)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not job.events_file.exists():
        time.sleep(0.05)
    assert [json.loads(line)["type"] for line in job.events_file.read_text().splitlines()] == [
        "figure",
        "metric",
    ]


def test_pushes_from_many_threads(job):
    figure = metric.MetricFigure("t", y1_name="loss")

    def push(offset):
        for step in range(500):
            figure.push_metric(offset + step, 0.5)

    threads = [threading.Thread(target=push, args=(i * 1000,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done()
    xs = sorted(e["x"] for e in job.events() if e["type"] == "metric")
    assert xs == sorted(i * 1000 + s for i in range(4) for s in range(500))


def test_metrics_are_flushed_at_exit_without_done(job):
    code = (
        "from kpl_helper import metric\n"
        "f = metric.MetricFigure('title', y1_name='loss')\n"
        "for no in range(1, 1001):\n"
        "    f.push_metric(x=no, y1=10.0 / no)\n"
    )
    process = job.run(code)
    assert process.returncode == 0, process.stderr
    found = job.events()
    assert found[0]["type"] == "figure"
    assert [e["x"] for e in found[1:]] == list(range(1, 1001))


def test_events_are_queued_not_written_by_push(job):
    figure = metric.MetricFigure("t", y1_name="loss")
    writer = events.get_writer()
    with writer._lock:  # hold the flush: push must still return at once
        for step in range(100):
            figure.push_metric(step, 0.5)
        assert not job.events_file.exists()
    assert len(job.events()) == 101
