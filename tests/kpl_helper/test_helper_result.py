"""send_scalar_result and send_curve_result as result events."""

from __future__ import annotations

import numpy as np
import pytest

from kpl_helper import result


def test_outside_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result.send_scalar_result(top1=0.9)
    result.send_curve_result("roc", "fpr", [0, 1], "tpr", [0, 1])
    assert list(tmp_path.iterdir()) == []


def test_scalar_results(job):
    result.send_scalar_result(top1=np.float64(0.91), top5=0.99, images=5000, split="val", ok=True)
    (event,) = job.events()
    assert event["type"] == "result"
    assert event["values"] == {"top1": 0.91, "top5": 0.99, "images": 5000, "split": "val", "ok": True}


def test_scalar_result_must_be_scalar(job):
    with pytest.raises(TypeError, match="result 'confusion' must be a number"):
        result.send_scalar_result(confusion=[[1, 0], [0, 1]])


def test_curve_result(job):
    result.send_curve_result("roc", "fpr", np.array([0.0, 0.5, 1.0]), "tpr", [0, 0.8, 1])
    (event,) = job.events()
    assert event == {
        "type": "result",
        "time": event["time"],
        "title": "roc",
        "x_name": "fpr",
        "x": [0.0, 0.5, 1.0],
        "y_name": "tpr",
        "y": [0.0, 0.8, 1.0],
    }


def test_curve_lengths_must_match(job):
    with pytest.raises(ValueError, match="3 fpr points but 2 tpr points"):
        result.send_curve_result("roc", "fpr", [0, 1, 2], "tpr", [0, 1])


def test_curve_point_must_be_a_number(job):
    with pytest.raises(TypeError, match="curve 'roc' tpr point 1 must be a number"):
        result.send_curve_result("roc", "fpr", [0, 1], "tpr", [0, "x"])
