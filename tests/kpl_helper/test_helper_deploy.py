"""The deploy response helpers give exactly the original's dictionaries."""

from __future__ import annotations

import numpy as np

from kpl_helper import deploy


def test_rectangle_box_detection():
    response = deploy.RectangleBoxObjectDetectionResponse(480, 640, 3)
    response.add_object("dog", np.float32(10.7), 20, 110.2, 220, np.float32(0.5))
    assert response.dumps() == {
        "type": "rectangle_box_detection",
        "height": 480,
        "width": 640,
        "depth": 3,
        "objects": [{"name": "dog", "score": 0.5, "xmin": 10, "ymin": 20, "xmax": 110, "ymax": 220}],
        "error": "",
    }
    assert type(response.dumps()["objects"][0]["score"]) is float
    assert response.dumps(error="bad image")["error"] == "bad image"


def test_classification():
    assert deploy.ClassificationResponse.dumps(1, 2, 3, 7) == {
        "type": "classification",
        "height": 1,
        "width": 2,
        "depth": 3,
        "class_id": 7,
        "class_name": None,
        "error": "",
    }
    assert deploy.ClassificationResponse.dumps(1, 2, 3, 7, "cat", "e")["class_name"] == "cat"


def test_segmentation():
    assert deploy.SegmentationResponse.dumps(1, 2, 3, [[0, 1]], error="x") == {
        "type": "segmentation",
        "height": 1,
        "width": 2,
        "depth": 3,
        "mask": [[0, 1]],
        "error": "x",
    }
