"""Publish a task's accepted labels as a new version of a kpl-dataset, split into `train` and `test`.

Each accepted record (not marked dropped) is copied with every field of its source record, plus
the label fields of the record format: `class_name` and `subclass` for the class kinds;
`width`, `height` and `object` (VOC's detection fields, with `subclass`, `points` and `text`)
for the object kinds; and `label`, the saved value as JSON, which keeps what those fields cannot
(masks, keypoint visibility). The split is drawn per class with a seeded shuffle, so the same
labels and seed publish the same parts; the version's lineage names the task.
"""

from __future__ import annotations

import json
import random
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from ..api.annotation import CLASS_KINDS, PublishRequest, TaskKind
from ..api.datasets import DatasetVersion
from ..catalog.annotation import AnnotationLabel
from ..catalog.datasets_view import open_reader
from ..catalog.serialize import version_model
from ..errors import Conflict
from .tasks import find, locate, may_change

if TYPE_CHECKING:
    from ..platform import Platform

String, Int, Float = "String", "Int", "Float"
CLASS_FIELDS = {"class_name": String, "subclass": String, "label": String}
OBJECT_FIELDS = {
    "width": Int,
    "height": Int,
    "object": [
        {
            "name": String,
            "subclass": String,
            "xmin": Int,
            "ymin": Int,
            "xmax": Int,
            "ymax": Int,
            "difficult": Int,
            "points": [[Float]],
            "text": String,
        }
    ],
    "label": String,
}


def label_fields(kind: TaskKind, value: dict) -> dict[str, Any]:
    """Return the record-format fields of a saved label value."""
    text = json.dumps(value, sort_keys=True)
    if kind in CLASS_KINDS:
        return {
            "class_name": value.get("class_name") or "",
            "subclass": value.get("subclass") or "",
            "label": text,
        }
    return {
        "width": value.get("width") or 0,
        "height": value.get("height") or 0,
        "object": [_object(shape) for shape in value.get("objects", [])],
        "label": text,
    }


def _object(shape: dict) -> dict[str, Any]:
    if shape["type"] == "box":
        xs, ys = [shape["xmin"], shape["xmax"]], [shape["ymin"], shape["ymax"]]
        points = [[shape["xmin"], shape["ymin"]], [shape["xmax"], shape["ymax"]]]
    elif shape["type"] == "mask":
        rows, cols = _mask_extent(shape["rle"])
        xs, ys, points = cols, rows, []
    else:  # polygon, keypoints ([x, y] or [x, y, v]; a keypoint not labelled has no place)
        points = [[float(p[0]), float(p[1])] for p in shape["points"] if len(p) < 3 or p[2] > 0]
        xs, ys = [p[0] for p in points] or [0], [p[1] for p in points] or [0]
    return {
        "name": shape["class_name"],
        "subclass": shape.get("subclass") or "",
        "xmin": round(min(xs)),
        "ymin": round(min(ys)),
        "xmax": round(max(xs)),
        "ymax": round(max(ys)),
        "difficult": 0,
        "points": [[float(x), float(y)] for x, y in points],
        "text": shape.get("text") or "",
    }


def _mask_extent(rle: dict) -> tuple[list[int], list[int]]:
    """Return the [first, last] row and column of a column-major RLE mask's pixels ([0, 0] when empty)."""
    height = rle["size"][0]
    rows, cols, at = [], [], 0
    for i, count in enumerate(rle["counts"]):
        if i % 2 and count:
            for pixel in (at, at + count - 1):
                cols.append(pixel // height)
                rows.append(pixel % height)
        at += count
    if not rows:
        return [0, 0], [0, 0]
    return [min(rows), max(rows)], [min(cols), max(cols)]


def stratum(kind: TaskKind, value: dict) -> str:
    """Return what a record's split is drawn within: its class, or its first object's class."""
    if kind in CLASS_KINDS:
        return value.get("class_name") or ""
    objects = value.get("objects") or []
    return objects[0]["class_name"] if objects else ""


def split(strata: dict[int, str], test_fraction: float, seed: int) -> dict[int, str]:
    """Return record -> `train` or `test`: in each class a seeded shuffle puts round(n x fraction) in test."""
    groups: dict[str, list[int]] = {}
    for record, key in sorted(strata.items()):
        groups.setdefault(key, []).append(record)
    parts: dict[int, str] = {}
    for key in sorted(groups):
        records = groups[key]
        random.Random(f"{seed}:{key}").shuffle(records)
        cut = round(len(records) * test_fraction)
        parts.update({r: "test" for r in records[:cut]})
        parts.update({r: "train" for r in records[cut:]})
    return parts


def publish(
    platform: Platform, project: str, name: str, request: PublishRequest, user: str, admin: bool
) -> DatasetVersion:
    """Write the accepted labels with their records as a new dataset version; answer that version."""
    from kpl_dataset import WriteOnlyDataset

    with platform.session() as session:
        task = find(session, project, name)
        may_change(task, user, admin)
        kind, source = TaskKind(task.kind), task.dataset_version
        dataset, version, ref = source.dataset.name, source.version, source.ref
        labels = dict(
            session.execute(
                select(AnnotationLabel.record, AnnotationLabel.value).where(
                    AnnotationLabel.task_id == task.id,
                    AnnotationLabel.state == "accepted",
                    AnnotationLabel.dropped.is_(False),
                )
            ).all()
        )
        places = {record: locate(task, record) for record in labels}
    if not labels:
        raise Conflict(f"task {name!r}: no accepted label to publish; review the labelled records first")
    _, view = platform.catalog.open_dataset(project, dataset, version)
    schemas = view.schemas()
    used = sorted({part for part, _ in places.values()})
    record_type = schemas[used[0]]
    for part in used[1:]:
        if schemas[part] != record_type:
            raise Conflict(
                f"task {name!r}: parts {used[0]!r} and {part!r} of {ref} hold different fields; "
                "publish a task on parts of one record type"
            )
    label_type = CLASS_FIELDS if kind in CLASS_KINDS else OBJECT_FIELDS
    record_type = {**record_type, **label_type}
    chosen = split({r: stratum(kind, v) for r, v in labels.items()}, request.test_fraction, request.seed)
    with platform.catalog.storage.staging(project) as folder:
        for out in ("train", "test"):
            records = [r for r in sorted(labels) if chosen[r] == out]
            if not records:
                continue
            with WriteOnlyDataset(str(folder), out, record_type) as writer:
                for record in records:
                    part, index = places[record]
                    fields = dict(open_reader(view.folder, part, None)[index])
                    writer.write({**fields, **label_fields(kind, labels[record])})
        lineage = {
            "annotation_task": name,
            "dataset": ref,
            "accepted": len(labels),
            "test_fraction": request.test_fraction,
            "seed": request.seed,
            "by": user,
        }
        row = platform.catalog.add_dataset(
            project, request.dataset, folder, request.description, lineage=lineage
        )
    return version_model("dataset", row)
