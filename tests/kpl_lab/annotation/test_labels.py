"""Labels: saves checked against the version loaded, values checked against the task, review, history, queues."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kpl_lab.annotation import labels, tasks
from kpl_lab.api.annotation import (
    LabelRequest,
    LabelSchemaRequest,
    LabelValue,
    QueueOrder,
    RecordState,
    ReviewRequest,
    TaskKind,
)
from kpl_lab.catalog.annotation import AnnotationSuggestion
from kpl_lab.errors import BadRequest, Conflict, Forbidden, NotFound

from .conftest import task_request

pytestmark = pytest.mark.databases


def save(platform, record, value, version, user="ann", admin=False, task="colours", **more):
    request = LabelRequest(value=value, version=version, **more)
    return labels.save(platform, "default", task, record, request, user, admin)


def review(platform, record, decision, version, user="rev", comment=""):
    request = ReviewRequest(decision=decision, version=version, comment=comment)
    return labels.review(platform, "default", "colours", record, request, user, False)


@pytest.fixture
def task(platform, images):
    return tasks.create(platform, "default", task_request(), "ann", None)


def test_two_annotators_never_overwrite_each_other(platform, task):
    first = save(platform, 2, {"class_name": "red", "subclass": "dark"}, 0, user="ann")
    assert (first.version, first.state, first.annotator) == (1, "labelled", "ann")
    with pytest.raises(Conflict) as refused:  # bob loaded the record before ann saved it
        save(platform, 2, {"class_name": "green"}, 0, user="bob")
    assert "record 2: ann saved it at" in refused.value.message and "(version 1)" in refused.value.message
    assert refused.value.field == "version"
    second = save(platform, 2, {"class_name": "green"}, 1, user="bob")
    assert (second.version, second.annotator, second.value["class_name"]) == (2, "bob", "green")
    with pytest.raises(Conflict, match="it has no label yet; you sent version 3 .send 0."):
        save(platform, 3, {"class_name": "green"}, 3)


@pytest.mark.parametrize(
    ("value", "field", "message"),
    [
        (
            {"class_name": "purple"},
            "value.class_name",
            "'purple' is not a class of this task .red, green, blue.",
        ),
        (
            {"class_name": "green", "subclass": "dark"},
            "value.subclass",
            "not a second-level class of 'green' .none.",
        ),
        ({}, "value.class_name", "a image_class label needs a class"),
        (
            {
                "class_name": "red",
                "objects": [{"type": "box", "class_name": "red", "xmin": 0, "ymin": 0, "xmax": 1, "ymax": 1}],
            },
            "value.objects",
            "labels the record's class, not objects",
        ),
    ],
)
def test_a_value_is_checked_against_the_task(platform, task, value, field, message):
    with pytest.raises(BadRequest, match=message) as refused:
        save(platform, 0, value, 0)
    assert refused.value.field == field


def test_a_dropped_record_needs_no_class(platform, task):
    assert save(platform, 0, {"dropped": True}, 0).value["dropped"] is True


def test_object_kinds_take_their_shapes(platform, images):
    schema = LabelSchemaRequest(
        classes=[{"name": "face"}], keypoints=["left eye", "right eye", "nose"], skeleton=[(0, 2), (1, 2)]
    )
    tasks.create(
        platform, "default", task_request("faces", TaskKind.keypoints, label_schema=schema), "ann", None
    )
    box = {"type": "box", "class_name": "face", "xmin": 1, "ymin": 1, "xmax": 5, "ymax": 6}
    with pytest.raises(BadRequest, match="a keypoints task draws keypoints, not box") as refused:
        save(platform, 0, {"objects": [box]}, 0, task="faces")
    assert refused.value.field == "value.objects.0.type"
    two = {"type": "keypoints", "class_name": "face", "points": [[1, 2, 2], [3, 4, 1]]}
    with pytest.raises(BadRequest, match="2 points, the task has 3 keypoints"):
        save(platform, 0, {"objects": [two]}, 0, task="faces")
    three = {**two, "points": [[1, 2, 2], [3, 4, 1], [0, 0, 0]]}
    assert save(platform, 0, {"objects": [three], "width": 16, "height": 12}, 0, task="faces").version == 1

    tasks.create(
        platform,
        "default",
        task_request("words", TaskKind.ocr, label_schema=LabelSchemaRequest(classes=[{"name": "word"}])),
        "ann",
        None,
    )
    with pytest.raises(BadRequest, match="an OCR box needs its text"):
        save(platform, 0, {"objects": [{**box, "class_name": "word"}]}, 0, task="words")
    assert (
        save(
            platform, 0, {"objects": [{**box, "class_name": "word", "text": "KPL"}]}, 0, task="words"
        ).version
        == 1
    )

    tasks.create(
        platform,
        "default",
        task_request("masks", TaskKind.masks, label_schema=LabelSchemaRequest(classes=[{"name": "sky"}])),
        "ann",
        None,
    )
    mask = {"type": "mask", "class_name": "sky", "rle": {"size": [2, 3], "counts": [1, 4, 1]}}
    with pytest.raises(BadRequest, match=r"\[2, 3\] is not the image's \[height, width\] \[12, 16\]"):
        save(platform, 0, {"objects": [mask], "width": 16, "height": 12}, 0, task="masks")
    assert save(platform, 0, {"objects": [mask]}, 0, task="masks").value["objects"][0]["rle"]["counts"] == [
        1,
        4,
        1,
    ]


def test_shapes_themselves_are_checked_by_the_request_model():
    with pytest.raises(ValidationError, match="counts add up to 5, not height x width = 6"):
        LabelValue.model_validate(
            {"objects": [{"type": "mask", "class_name": "a", "rle": {"size": [2, 3], "counts": [1, 4]}}]}
        )
    with pytest.raises(ValidationError, match="xmin <= xmax"):
        LabelValue.model_validate(
            {"objects": [{"type": "box", "class_name": "a", "xmin": 5, "ymin": 0, "xmax": 1, "ymax": 1}]}
        )
    with pytest.raises(ValidationError, match="skeleton: .0, 3. must join two different keypoints"):
        LabelSchemaRequest(classes=[{"name": "a"}], keypoints=["x", "y"], skeleton=[(0, 3)])


def test_review_accepts_or_sends_back_with_a_comment(platform, task):
    save(platform, 4, {"class_name": "blue"}, 0)
    with pytest.raises(BadRequest, match="say what is wrong"):
        review(platform, 4, "reject", 1)
    rejected = review(platform, 4, "reject", 1, comment="it is green")
    assert (rejected.state, rejected.version, rejected.reviewer, rejected.comment) == (
        "rejected",
        2,
        "rev",
        "it is green",
    )
    back = labels.queue(platform, "default", "colours", "ann", RecordState.rejected, mine=True)
    assert [e.record for e in back.records] == [4]
    assert labels.queue(platform, "default", "colours", "bob", RecordState.rejected, mine=True).records == []
    with pytest.raises(Conflict, match="rev saved it at"):  # the annotator still held version 1
        save(platform, 4, {"class_name": "green"}, 1)
    again = save(platform, 4, {"class_name": "green"}, 2)
    assert (again.state, again.reviewer, again.comment) == ("labelled", None, "")
    accepted = review(platform, 4, "accept", 3)
    assert accepted.state == "accepted"
    with pytest.raises(NotFound, match="no label to review"):
        review(platform, 5, "accept", 1)
    steps = labels.history(platform, "default", "colours", 4).events
    assert [(e.action, e.user, e.version) for e in steps] == [
        ("saved", "ann", 1),
        ("rejected", "rev", 2),
        ("saved", "ann", 3),
        ("accepted", "rev", 4),
    ]
    assert steps[1].comment == "it is green" and steps[2].value["class_name"] == "green"


def test_annotators_and_reviewers_are_who_the_task_names(platform, images):
    tasks.create(platform, "default", task_request(assignees=["ann"], reviewers=["rev"]), "boss", None)
    with pytest.raises(Forbidden, match="you are not one of its annotators .ann."):
        save(platform, 0, {"class_name": "red"}, 0, user="bob")
    assert save(platform, 0, {"class_name": "red"}, 0, user="boss", admin=True).version == 1
    with pytest.raises(Forbidden, match="you are not one of its reviewers .rev."):
        review(platform, 0, "accept", 1, user="ann")


def test_history_names_the_suggestion_a_label_took(platform, task):
    with platform.session() as session:
        task_id = tasks.find(session, "default", "colours").id
        session.add(
            AnnotationSuggestion(
                task_id=task_id,
                record=1,
                run_id=7,
                value={"class_name": "red"},
                score=0.9,
                uncertainty=0.1,
                model_version="digits:abc",
            )
        )
    with pytest.raises(BadRequest, match="record 1 has no suggestion of run 6"):
        save(platform, 1, {"class_name": "red"}, 0, suggestion_run=6)
    saved = save(platform, 1, {"class_name": "red"}, 0, suggestion_run=7)
    assert saved.suggestion_run == 7
    shown = labels.show_record(platform, "default", "colours", 1, "/kpl/api")
    assert shown.suggestion.model_version == "digits:abc" and shown.label.version == 1
    (event,) = labels.history(platform, "default", "colours", 1).events
    assert (event.suggestion_run, event.suggestion_model, event.suggestion_score) == (7, "digits:abc", 0.9)


def _records(page):
    return [e.record for e in page.records]


def test_queues_skip_labelled_records_and_deal_to_assignees(platform, images):
    tasks.create(platform, "default", task_request(assignees=["ann", "bob"]), "ann", None)
    for record in (0, 1, 2, 5):
        save(platform, record, {"class_name": "red"}, 0, user="ann")
    page = labels.queue(platform, "default", "colours", "x", limit=3)
    assert _records(page) == [3, 4, 6] and page.next == "6"
    assert _records(labels.queue(platform, "default", "colours", "x", after=page.next)) == [7, 8, 9]
    assert _records(labels.queue(platform, "default", "colours", "ann", mine=True)) == [4, 6, 8]
    assert [e.assignee for e in labels.queue(platform, "default", "colours", "bob", mine=True).records] == [
        "bob"
    ] * 3
    everything = labels.queue(platform, "default", "colours", "x", state=None, limit=4)
    assert [(e.record, e.state) for e in everything.records] == [
        (0, RecordState.labelled),
        (1, RecordState.labelled),
        (2, RecordState.labelled),
        (3, RecordState.unlabelled),
    ]
    assert _records(labels.queue(platform, "default", "colours", "x", RecordState.labelled)) == [0, 1, 2, 5]
    with pytest.raises(BadRequest, match="is not a cursor this queue answered") as refused:
        labels.queue(platform, "default", "colours", "x", after="0.5:3")
    assert refused.value.field == "after"


def test_the_uncertainty_queue_shows_the_least_certain_first(platform, task):
    with platform.session() as session:
        task_id = tasks.find(session, "default", "colours").id
        for record, uncertainty in ((1, 0.2), (3, 0.9), (6, 0.5), (8, 0.9)):
            session.add(
                AnnotationSuggestion(
                    task_id=task_id,
                    record=record,
                    run_id=1,
                    value={"class_name": "red"},
                    uncertainty=uncertainty,
                )
            )
    save(platform, 6, {"class_name": "red"}, 0)
    first = labels.queue(platform, "default", "colours", "x", order=QueueOrder.uncertainty, limit=2)
    assert _records(first) == [3, 8]
    rest = labels.queue(
        platform, "default", "colours", "x", order=QueueOrder.uncertainty, after=first.next, limit=20
    )
    assert _records(rest) == [1, 0, 2, 4, 5, 7, 9]  # then the records without a suggestion, in order
    assert [e.uncertainty for e in rest.records[:2]] == [0.2, None]
