"""Annotation tasks: creation checks, the records they number, dealing to assignees, changes, progress."""

from __future__ import annotations

import pytest

from kpl_lab.annotation import labels, tasks
from kpl_lab.api.annotation import LabelRequest, LabelSchemaRequest, TaskKind, TaskUpdateRequest
from kpl_lab.errors import BadRequest, Conflict, Forbidden, NotFound

from .conftest import task_request

pytestmark = pytest.mark.databases


def test_a_task_numbers_the_records_of_its_parts_in_order(platform, images):
    task = tasks.create(platform, "default", task_request(parts=["test", "train"]), "ann", None)
    assert task.dataset == images and task.record_count == 10
    assert task.parts == {"test": 4, "train": 6}
    assert task.content_field == "content"
    assert [c.color for c in task.label_schema.classes] == ["#4e79a7", "#f28e2b", "#e15759"]
    shown = labels.show_record(platform, "default", "colours", 5, "/kpl/api")
    assert (shown.part, shown.index) == ("train", 1)
    assert shown.fields["path"] == "train/img1.png"
    url = shown.fields["content"]["url"]
    assert (
        url.startswith("/kpl/api/datasets/images/versions/") and "records/1/fields/content?part=train" in url
    )
    with pytest.raises(NotFound, match="record 10 not found .records 0 to 9"):
        labels.show_record(platform, "default", "colours", 10, "/kpl/api")


def test_a_limit_labels_the_first_records_only(platform, images):
    task = tasks.create(platform, "default", task_request(limit=7), "ann", None)
    assert task.parts == {"train": 6, "test": 1} and task.record_count == 7


def test_text_tasks_show_the_text_field(platform, images):
    task = tasks.create(platform, "default", task_request(kind=TaskKind.text_class), "ann", None)
    assert task.content_field == "text"


@pytest.mark.parametrize(
    ("more", "field", "message"),
    [
        ({"parts": ["val"]}, "parts.0", "has no part 'val'"),
        ({"parts": ["train", "train"]}, "parts.1", "named twice"),
        ({"content_field": "nope"}, "content_field", "has no field 'nope'"),
        ({"content_field": "path"}, "content_field", "'path' is a String field"),
        ({"kind": TaskKind.keypoints}, "label_schema.keypoints", "names its keypoints"),
        ({"assignees": ["ann", "ann"]}, "assignees.1", "named twice"),
    ],
)
def test_a_task_refuses_what_its_dataset_or_kind_cannot_be(platform, images, more, field, message):
    with pytest.raises(BadRequest, match=message) as refused:
        tasks.create(platform, "default", task_request(**more), "ann", None)
    assert refused.value.field == field


def test_assignees_and_reviewers_are_members_of_the_project(platform, images):
    with pytest.raises(BadRequest, match="'bob' is not a member of the project .ann, cy.") as refused:
        tasks.create(platform, "default", task_request(reviewers=["bob"]), "ann", ["ann", "cy"])
    assert refused.value.field == "reviewers.0"
    task = tasks.create(platform, "default", task_request(assignees=["cy", "ann"]), "ann", ["ann", "cy"])
    assert task.assignees == ["cy", "ann"]


def test_names_are_unique_in_a_project_and_unknown_ones_not_found(platform, images):
    tasks.create(platform, "default", task_request(), "ann", None)
    with pytest.raises(Conflict, match="exists already"):
        tasks.create(platform, "default", task_request(), "ann", None)
    with pytest.raises(NotFound, match="annotation task 'nope' not found"):
        tasks.show(platform, "default", "nope")
    with pytest.raises(NotFound):
        tasks.show(platform, "other", "colours")


def test_only_its_maker_or_an_administrator_changes_a_task(platform, images):
    tasks.create(platform, "default", task_request(), "ann", None)
    change = TaskUpdateRequest(description="now with reviewers", reviewers=["cy"])
    with pytest.raises(Forbidden, match="only 'ann', who made it"):
        tasks.update(platform, "default", "colours", change, "bob", False, None)
    assert tasks.update(platform, "default", "colours", change, "bob", True, None).reviewers == ["cy"]
    with pytest.raises(Forbidden):
        tasks.delete(platform, "default", "colours", "bob", False)


def test_a_new_label_schema_keeps_every_class(platform, images):
    tasks.create(platform, "default", task_request(), "ann", None)
    fewer = LabelSchemaRequest(
        classes=[{"name": "red", "children": ["dark"]}, {"name": "green"}, {"name": "blue"}]
    )
    with pytest.raises(BadRequest, match="'red' lost its second-level class 'light'"):
        tasks.update(
            platform, "default", "colours", TaskUpdateRequest(label_schema=fewer), "ann", False, None
        )
    more = LabelSchemaRequest(
        classes=[
            {"name": "red", "children": ["dark", "light"]},
            {"name": "green"},
            {"name": "blue"},
            {"name": "grey"},
        ]
    )
    task = tasks.update(
        platform, "default", "colours", TaskUpdateRequest(label_schema=more), "ann", False, None
    )
    assert [c.name for c in task.label_schema.classes] == ["red", "green", "blue", "grey"]


def test_progress_per_state_and_per_person(platform, images):
    tasks.create(platform, "default", task_request(assignees=["ann", "bob", "cy"]), "ann", None)

    def label(record, user, name="green", dropped=False):
        value = {"class_name": name, "dropped": dropped}
        labels.save(platform, "default", "colours", record, LabelRequest(value=value, version=0), user, False)

    label(0, "ann")
    label(3, "ann", dropped=True)
    label(1, "bob")
    progress = tasks.show(platform, "default", "colours").progress
    assert (progress.records, progress.labelled, progress.dropped, progress.percent) == (10, 3, 1, 30.0)
    people = {p.user: p for p in progress.people}
    assert [p.user for p in progress.people] == ["ann", "bob", "cy"]
    assert (people["ann"].assigned, people["ann"].labelled, people["ann"].percent) == (4, 2, 50.0)
    assert (people["bob"].assigned, people["cy"].assigned, people["cy"].percent) == (3, 3, 0.0)


def test_a_dataset_version_being_labelled_is_not_deleted(platform, images):
    tasks.create(platform, "default", task_request(), "ann", None)
    with pytest.raises(Conflict, match="annotation task 'colours' labels it"):
        platform.catalog.delete_dataset("default", "images")
    tasks.delete(platform, "default", "colours", "ann", False)
    assert platform.catalog.delete_dataset("default", "images") == [images]
