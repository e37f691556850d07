"""Pascal VOC mean average precision: greedy matching at an IoU threshold, all-point interpolation."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

Box = Sequence[float]  # xmin, ymin, xmax, ymax in pixels, max inclusive


def box_iou(box: Box, others: np.ndarray) -> np.ndarray:
    """Return the IoU of one box with each row of `others` (VOC's inclusive pixel boxes)."""
    if len(others) == 0:
        return np.zeros(0)
    iw = np.minimum(box[2], others[:, 2]) - np.maximum(box[0], others[:, 0]) + 1
    ih = np.minimum(box[3], others[:, 3]) - np.maximum(box[1], others[:, 1]) + 1
    inter = np.clip(iw, 0, None) * np.clip(ih, 0, None)
    area = (box[2] - box[0] + 1) * (box[3] - box[1] + 1)
    areas = (others[:, 2] - others[:, 0] + 1) * (others[:, 3] - others[:, 1] + 1)
    return inter / (area + areas - inter)


def average_precision(recall: np.ndarray, precision: np.ndarray) -> float:
    """Return the area under the precision envelope (VOC 2010+ all-point interpolation)."""
    recall = np.concatenate([[0.0], recall, [1.0]])
    precision = np.concatenate([[0.0], precision, [0.0]])
    precision = np.maximum.accumulate(precision[::-1])[::-1]
    steps = np.nonzero(recall[1:] != recall[:-1])[0]
    return float(np.sum((recall[steps + 1] - recall[steps]) * precision[steps + 1]))


def class_ap(
    detections: list[tuple[int, float, Box]],
    truths: dict[int, tuple[np.ndarray, np.ndarray]],
    iou_threshold: float,
) -> tuple[float, np.ndarray, np.ndarray]:
    """Return (AP, recall, precision) of one class.

    detections: (image index, score, box); truths: image index -> (boxes N x 4, difficult N).
    A detection matching a difficult object counts as neither right nor wrong.
    """
    positives = sum(int((~difficult).sum()) for _, difficult in truths.values())
    if positives == 0:
        return math.nan, np.zeros(0), np.zeros(0)
    taken = {image: np.zeros(len(boxes), dtype=bool) for image, (boxes, _) in truths.items()}
    matched = []  # per counted detection: True finds a new object, False is a false positive
    for image, _, box in sorted(detections, key=lambda d: -d[1]):
        boxes, difficult = truths.get(image, (np.zeros((0, 4)), np.zeros(0, dtype=bool)))
        overlaps = box_iou(box, boxes)
        best = int(overlaps.argmax()) if len(overlaps) else -1
        if best >= 0 and overlaps[best] >= iou_threshold:
            if difficult[best]:
                continue
            if not taken[image][best]:
                taken[image][best] = True
                matched.append(True)
                continue
        matched.append(False)
    outcome = np.array(matched, dtype=bool)
    true_positives, false_positives = np.cumsum(outcome), np.cumsum(~outcome)
    recall = true_positives / positives
    precision = true_positives / np.maximum(true_positives + false_positives, np.finfo(float).eps)
    return average_precision(recall, precision), recall, precision


def mean_average_precision(
    detections: list[list[tuple[str, float, Box]]],
    truths: list[list[dict]],
    class_names: list[str],
    iou_threshold: float = 0.5,
) -> tuple[float, dict[str, float]]:
    """Return (mAP over the classes that have objects, AP per class; NaN for a class with none).

    detections[i]: (class name, score, box) of image i; truths[i]: the VOC objects of image i
    (name, xmin, ymin, xmax, ymax, difficult).
    """
    if len(detections) != len(truths):
        raise ValueError(f"{len(detections)} images of detections but {len(truths)} of ground truth")
    per_class = {}
    for name in class_names:
        class_truths = {}
        for image, objects in enumerate(truths):
            mine = [obj for obj in objects if obj["name"] == name]
            if mine:
                boxes = np.array(
                    [[obj["xmin"], obj["ymin"], obj["xmax"], obj["ymax"]] for obj in mine], float
                )
                difficult = np.array([bool(obj.get("difficult", 0)) for obj in mine])
                class_truths[image] = (boxes, difficult)
        class_detections = [
            (image, score, box)
            for image, found in enumerate(detections)
            for c, score, box in found
            if c == name
        ]
        per_class[name] = class_ap(class_detections, class_truths, iou_threshold)[0]
    scored = [ap for ap in per_class.values() if not math.isnan(ap)]
    return (sum(scored) / len(scored) if scored else math.nan), per_class
