"""send_progress: clamped with a warning, and it flushes the metrics queued before it."""

from __future__ import annotations

import pytest

from kpl_helper import metric
from kpl_helper.progress import send_progress


def test_outside_does_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    send_progress(2.0)  # the original returned before checking anything
    assert capsys.readouterr().out == ""
    assert list(tmp_path.iterdir()) == []


def test_progress_event(job):
    for no in range(1, 4):
        send_progress(float(no) / 4)
    found = [e for e in job.events() if e["type"] == "progress"]
    assert [e["value"] for e in found] == [0.25, 0.5, 0.75]


@pytest.mark.parametrize(("given", "sent"), [(-0.5, 0.0), (1.5, 1.0), (float("inf"), 1.0)])
def test_out_of_range_is_clamped_with_a_warning(job, capsys, given, sent):
    send_progress(given)
    assert f"Progress should be in range [0.0, 1.0]. but get `{given}`" in capsys.readouterr().out
    assert job.events()[-1]["value"] == sent


def test_progress_must_be_a_number(job):
    with pytest.raises(TypeError, match="progress must be a number"):
        send_progress("half")


def test_progress_flushes_queued_metrics_first(job):
    figure = metric.MetricFigure("t", y1_name="loss")
    figure.push_metric(1, 0.5)
    send_progress(0.5)
    # no explicit flush: progress itself wrote the file, metrics first
    lines = job.events_file.read_text().splitlines()
    assert [line.split('"type":"')[1].split('"')[0] for line in lines] == ["figure", "metric", "progress"]
