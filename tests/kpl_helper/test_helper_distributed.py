"""Rank and world size, and metrics and progress sent from rank 0 only unless asked."""

from __future__ import annotations

import kpl_helper
from kpl_helper import metric
from kpl_helper.progress import send_progress


def test_rank_and_world_size_default_to_one_worker(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert (kpl_helper.get_rank(), kpl_helper.get_world_size(), kpl_helper.get_local_rank()) == (0, 1, 0)
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert (kpl_helper.get_rank(), kpl_helper.get_world_size(), kpl_helper.get_local_rank()) == (3, 4, 1)


def test_rank_zero_sends_as_before(job, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    figure = metric.MetricFigure("loss", y1_name="train_loss")
    figure.push_metric(1, 0.5)
    send_progress(0.5)
    found = job.events()
    assert [e["type"] for e in found] == ["figure", "metric", "progress"]
    assert found[1]["values"] == {"train_loss": 0.5}


def test_other_ranks_send_nothing_unless_asked(job, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    figure = metric.MetricFigure("loss", y1_name="train_loss", y2_name="eval_loss")
    figure.push_metric(1, 0.5, 0.6)
    send_progress(0.5)
    assert job.events() == []
    figure.push_metric(2, 0.25, float("nan"), all_ranks=True)
    found = job.events()
    assert [(e["type"], e["x"]) for e in found] == [("metric", 2)]
    assert found[0]["values"] == {"train_loss (rank 1)": 0.25, "eval_loss (rank 1)": None}


def test_every_rank_sends_with_the_environment_flag(job, monkeypatch):
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("KPL_ALL_RANKS", "1")
    metric.MetricFigure("acc", y1_name="acc").push_metric(x=1, y1=0.9)
    assert [e["values"] for e in job.events()] == [{"acc (rank 2)": 0.9}]
