"""Publish: accepted labels become a dataset version with train/test parts, label fields and lineage."""

from __future__ import annotations

import json

import pytest

from kpl_dataset import ReadOnlyDataset
from kpl_lab.annotation import labels, publish, tasks
from kpl_lab.api.annotation import LabelRequest, PublishRequest, ReviewRequest, TaskKind
from kpl_lab.errors import Conflict, Forbidden

from .conftest import task_request

pytestmark = pytest.mark.databases


def label(platform, task, record, value, accept=True):
    saved = labels.save(platform, "default", task, record, LabelRequest(value=value, version=0), "ann", False)
    if accept:
        labels.review(
            platform,
            "default",
            task,
            record,
            ReviewRequest(decision="accept", version=saved.version),
            "rev",
            False,
        )


def records(platform, ref):
    row = platform.catalog.get_dataset("default", ref)
    folder = platform.catalog.path(row)
    return {part: list(ReadOnlyDataset(str(folder), part)) for part in row.parts}


def test_accepted_labels_are_published_split_by_class_with_lineage(platform, images):
    tasks.create(platform, "default", task_request(), "ann", None)
    for record in range(10):
        label(
            platform, "colours", record, {"class_name": "red" if record < 5 else "green"}, accept=record != 9
        )
    dropped = LabelRequest(value={"class_name": "red", "dropped": True}, version=2)  # cleaning: drop record 0
    saved = labels.save(platform, "default", "colours", 0, dropped, "ann", False)
    accept = ReviewRequest(decision="accept", version=saved.version)
    labels.review(platform, "default", "colours", 0, accept, "rev", False)
    with pytest.raises(Forbidden):
        publish.publish(platform, "default", "colours", PublishRequest(dataset="out"), "bob", False)
    request = PublishRequest(dataset="colours-labelled", test_fraction=0.5, seed=3)
    version = publish.publish(platform, "default", "colours", request, "ann", False)
    # record 0 is dropped and record 9 not accepted: 8 published, 4 red and 4 green, half of each in test
    assert version.record_count == 8 and version.parts == {"train": 4, "test": 4}
    assert version.lineage["annotation_task"] == "colours" and version.lineage["dataset"] == images
    parts = records(platform, version.ref)
    published = [r for part in parts.values() for r in part]
    paths = [f"train/img{i}.png" for i in range(1, 6)] + [f"test/img{i}.png" for i in (6, 7, 8)]
    assert sorted(r["path"] for r in published) == sorted(paths)
    assert {r["class_name"] for r in parts["test"]} == {"red", "green"}  # each class is split
    assert all(r["content"].startswith(b"\x89PNG") for r in published)
    assert json.loads(published[0]["label"])["class_name"] == published[0]["class_name"]
    again = publish.publish(platform, "default", "colours", request, "ann", False)
    assert records(platform, again.ref) == parts  # the same labels and seed publish the same parts


def test_boxes_are_published_as_detection_objects(platform, images):
    tasks.create(platform, "default", task_request("boxes", TaskKind.boxes), "ann", None)
    box = {
        "type": "box",
        "class_name": "red",
        "subclass": "dark",
        "xmin": 1.4,
        "ymin": 2,
        "xmax": 9.6,
        "ymax": 7,
    }
    label(platform, "boxes", 3, {"objects": [box], "width": 16, "height": 12})
    version = publish.publish(
        platform, "default", "boxes", PublishRequest(dataset="boxed", test_fraction=0.0), "ann", False
    )
    (record,) = records(platform, version.ref)["train"]
    (obj,) = record["object"]
    assert (record["width"], record["height"]) == (16, 12)
    assert (obj["name"], obj["subclass"], obj["xmin"], obj["ymin"], obj["xmax"], obj["ymax"]) == (
        "red",
        "dark",
        1,
        2,
        10,
        7,
    )


def test_nothing_accepted_is_nothing_to_publish(platform, images):
    tasks.create(platform, "default", task_request(), "ann", None)
    label(platform, "colours", 0, {"class_name": "red"}, accept=False)
    with pytest.raises(Conflict, match="no accepted label to publish"):
        publish.publish(platform, "default", "colours", PublishRequest(dataset="out"), "ann", False)


def test_the_split_is_drawn_within_each_class():
    chosen = publish.split({r: "a" if r < 10 else "b" for r in range(14)}, 0.3, 0)
    assert (
        sum(chosen[r] == "test" for r in range(10)) == 3
        and sum(chosen[r] == "test" for r in range(10, 14)) == 1
    )
    assert chosen == publish.split({r: "a" if r < 10 else "b" for r in range(14)}, 0.3, 0)
