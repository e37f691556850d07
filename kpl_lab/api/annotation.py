"""Annotation: labelling tasks on a dataset version, labels with their versions and history, review,
suggestions, publishing, export and import.

Requests are checked here field by field; what depends on the task (its kind, its classes) is
checked by `kpl_lab.annotation.values`. Request and answer models are distinct classes: a
label value comes back as the JSON object that was saved.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .base import Body, matching
from .catalog import Name, Ref

# a class, second-level class or keypoint name: printable, no surrounding spaces, at most 100 characters
CLASS_PATTERN = r"^[^\s\x00-\x1f\x7f](?:[^\x00-\x1f\x7f]{0,98}[^\s\x00-\x1f\x7f])?$"
# a user as the hub (or the single-user server) names them
USER_PATTERN = r"^[^\x00-\x1f\x7f]{1,200}$"
# a top-level field of a record
FIELD_PATTERN = r"^[^.\x00-\x1f\x7f]{1,200}$"
COLOR_PATTERN = r"^#[0-9a-fA-F]{6}$"
if TYPE_CHECKING:  # checked strings to type checkers
    ClassName = str
    UserName = str
    FieldName = str
    Color = str
else:
    ClassName = matching(CLASS_PATTERN)
    UserName = matching(USER_PATTERN)
    FieldName = matching(FIELD_PATTERN)
    Color = matching(COLOR_PATTERN)
MAX_CLASSES = 1000
MAX_OBJECTS = 10_000
MAX_POINTS = 10_000
MAX_SIDE = 100_000  # pixels of an image side
MAX_TEXT = 10_000  # characters of an OCR text or a comment
Coordinate = Annotated[float, Field(ge=-MAX_SIDE, le=2 * MAX_SIDE, allow_inf_nan=False)]


class TaskKind(str, Enum):
    """What a task labels: an image's class, its objects (boxes, polygons, masks, keypoints, OCR), a text's or a sound's class."""

    image_class = "image_class"
    boxes = "boxes"
    polygons = "polygons"
    masks = "masks"
    keypoints = "keypoints"
    ocr = "ocr"
    text_class = "text_class"
    audio_class = "audio_class"


CLASS_KINDS = (TaskKind.image_class, TaskKind.text_class, TaskKind.audio_class)
IMAGE_KINDS = (
    TaskKind.image_class,
    TaskKind.boxes,
    TaskKind.polygons,
    TaskKind.masks,
    TaskKind.keypoints,
    TaskKind.ocr,
)


class LabelState(str, Enum):
    """Where a record's label is: saved by its annotator, then accepted or rejected by a reviewer."""

    labelled = "labelled"
    accepted = "accepted"
    rejected = "rejected"


class RecordState(str, Enum):
    """A record's state in a queue: unlabelled, or its label's state."""

    unlabelled = "unlabelled"
    labelled = "labelled"
    accepted = "accepted"
    rejected = "rejected"


class QueueOrder(str, Enum):
    """The order of a queue: record number, or the pre-labelling model's uncertainty (the least certain first)."""

    record = "record"
    uncertainty = "uncertainty"


class ExportFormat(str, Enum):
    """The label formats a task exports to and imports from."""

    voc = "voc"
    coco = "coco"
    labelme = "labelme"
    yolo = "yolo"


# requests


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LabelClassRequest(_Request):
    """A first-level class with its second-level classes."""

    name: ClassName
    children: list[ClassName] = Field(default=[], max_length=MAX_CLASSES, description="second-level classes")
    color: Color | None = Field(default=None, description="#rrggbb; default: one of a fixed palette")

    @model_validator(mode="after")
    def _unique_children(self) -> LabelClassRequest:
        _refuse_repeats(self.children, "children")
        return self


class LabelSchemaRequest(_Request):
    """The classes a task labels with, and for keypoints the points and the skeleton joining them."""

    classes: list[LabelClassRequest] = Field(min_length=1, max_length=MAX_CLASSES)
    keypoints: list[ClassName] = Field(default=[], max_length=100, description="keypoint names, in order")
    skeleton: list[tuple[int, int]] = Field(
        default=[], max_length=1000, description="pairs of keypoint indices drawn as lines"
    )

    @model_validator(mode="after")
    def _consistent(self) -> LabelSchemaRequest:
        _refuse_repeats([c.name for c in self.classes], "classes")
        _refuse_repeats(self.keypoints, "keypoints")
        for a, b in self.skeleton:
            if not (0 <= a < len(self.keypoints) and 0 <= b < len(self.keypoints)) or a == b:
                raise ValueError(
                    f"skeleton: [{a}, {b}] must join two different keypoints (0 to {len(self.keypoints) - 1})"
                )
        return self


def _refuse_repeats(names: list[str], what: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"{what}: {name!r} is named twice")
        seen.add(name)


class TaskRequest(_Request):
    """A new labelling task: the records of a dataset version, what to label them with, and who labels and reviews."""

    name: Name
    dataset: Ref = Field(description="NAME or NAME:VERSION (default: the newest version)")
    kind: TaskKind
    label_schema: LabelSchemaRequest
    parts: list[Name] | None = Field(
        default=None, max_length=100, description="the parts to label, in this order (default: every part)"
    )
    limit: int | None = Field(default=None, ge=1, le=1 << 40, description="label only the first N records")
    content_field: FieldName | None = Field(
        default=None,
        description="the field shown to annotators (default: `content`; for text, `text` when there is one)",
    )
    assignees: list[UserName] = Field(
        default=[],
        max_length=1000,
        description="annotators: record r goes to assignees[r mod n] (empty: any member labels any record)",
    )
    reviewers: list[UserName] = Field(
        default=[], max_length=1000, description="who may accept and reject (empty: any member)"
    )
    description: str = Field(default="", max_length=MAX_TEXT)


class TaskUpdateRequest(_Request):
    """Changes to a task: description, annotators, reviewers, or a label schema that keeps every class."""

    description: str | None = Field(default=None, max_length=MAX_TEXT)
    assignees: list[UserName] | None = Field(default=None, max_length=1000)
    reviewers: list[UserName] | None = Field(default=None, max_length=1000)
    label_schema: LabelSchemaRequest | None = Field(
        default=None,
        description="a schema that keeps every class, second-level class and keypoint (new ones may be added)",
    )


class RunLengths(_Request):
    """A brush mask as COCO's uncompressed RLE: runs of 0 and 1 pixels, column by column, starting with 0s."""

    size: tuple[Annotated[int, Field(ge=1, le=MAX_SIDE)], Annotated[int, Field(ge=1, le=MAX_SIDE)]] = Field(
        description="[height, width]"
    )
    counts: list[Annotated[int, Field(ge=0, le=MAX_SIDE * MAX_SIDE)]] = Field(max_length=1_000_000)

    @model_validator(mode="after")
    def _covers_the_image(self) -> RunLengths:
        height, width = self.size
        if sum(self.counts) != height * width:
            raise ValueError(f"counts add up to {sum(self.counts)}, not height x width = {height * width}")
        return self


class _Shape(_Request):
    class_name: ClassName
    subclass: ClassName | None = Field(default=None, description="a second-level class of class_name")


class BoxShape(_Shape):
    """A rectangle in pixels (max inclusive), with its text in OCR tasks."""

    type: Literal["box"]
    xmin: Coordinate
    ymin: Coordinate
    xmax: Coordinate
    ymax: Coordinate
    text: str | None = Field(default=None, max_length=MAX_TEXT, description="the text read in the box (OCR)")

    @model_validator(mode="after")
    def _ordered(self) -> BoxShape:
        if self.xmax < self.xmin or self.ymax < self.ymin:
            raise ValueError("a box needs xmin <= xmax and ymin <= ymax")
        return self


class PolygonShape(_Shape):
    """A polygon of [x, y] points, with its text in OCR tasks."""

    type: Literal["polygon"]
    points: list[tuple[Coordinate, Coordinate]] = Field(min_length=3, max_length=MAX_POINTS)
    text: str | None = Field(default=None, max_length=MAX_TEXT)


class MaskShape(_Shape):
    """A brush mask of one object or class."""

    type: Literal["mask"]
    rle: RunLengths


class KeypointsShape(_Shape):
    """The keypoints of one object, [x, y, v] each in the schema's order (v: 0 not labelled, 1 hidden, 2 visible)."""

    type: Literal["keypoints"]
    points: list[tuple[Coordinate, Coordinate, Annotated[int, Field(ge=0, le=2)]]] = Field(max_length=100)


Shape = Annotated[BoxShape | PolygonShape | MaskShape | KeypointsShape, Field(discriminator="type")]


class LabelValue(_Request):
    """A record's label: its class (class kinds) or its objects (the others); `dropped` marks it for removal."""

    class_name: ClassName | None = Field(default=None, description="the class (image, text and audio class)")
    subclass: ClassName | None = Field(default=None, description="a second-level class of class_name")
    objects: list[Shape] = Field(default=[], max_length=MAX_OBJECTS)
    width: int | None = Field(default=None, ge=1, le=MAX_SIDE, description="the image's width in pixels")
    height: int | None = Field(default=None, ge=1, le=MAX_SIDE)
    dropped: bool = Field(
        default=False, description="the record is to be removed (cleaning): never published"
    )


class LabelRequest(_Request):
    """Save a record's label, if it is still at the version the annotator loaded."""

    value: LabelValue
    version: int = Field(ge=0, le=1 << 31, description="the label's version you loaded (0: there was none)")
    suggestion_run: int | None = Field(
        default=None, ge=1, le=1 << 31, description="the pre-labelling run whose suggestion this value takes"
    )


class ReviewRequest(_Request):
    """Accept or reject a labelled record."""

    decision: Literal["accept", "reject"]
    comment: str = Field(
        default="", max_length=MAX_TEXT, description="what is wrong (shown to the annotator)"
    )
    version: int = Field(ge=1, le=1 << 31, description="the label's version you reviewed")


class PublishRequest(_Request):
    """Publish a task's accepted labels as a new version of a dataset, split into train and test."""

    dataset: Name = Field(description="the dataset to add a version to (made when new)")
    test_fraction: float = Field(default=0.2, ge=0.0, le=0.9, description="share of each class put in `test`")
    seed: int = Field(default=0, ge=0, le=1 << 31, description="seed of the split's shuffle")
    description: str = Field(default="", max_length=MAX_TEXT)


# answers


class LabelClass(Body):
    """A first-level class with its second-level classes."""

    name: str
    children: list[str]
    color: str


class LabelSchema(Body):
    """A task's classes, keypoints and skeleton."""

    classes: list[LabelClass]
    keypoints: list[str]
    skeleton: list[tuple[int, int]]


class PersonProgress(Body):
    """What one person has done in a task."""

    user: str
    assigned: int | None = Field(description="records dealt to them (null: the task deals to nobody)")
    labelled: int = Field(description="records whose label they saved last")
    accepted: int
    rejected: int
    reviewed: int = Field(description="records they accepted or rejected")
    percent: float | None = Field(description="labelled / assigned x 100")


class TaskProgress(Body):
    """How far a task is, in records and percent."""

    records: int
    labelled: int = Field(description="records with a label (in any state)")
    accepted: int
    rejected: int
    dropped: int = Field(description="records marked for removal")
    suggested: int = Field(description="records with a pre-labelling suggestion")
    percent: float = Field(description="labelled / records x 100")
    percent_accepted: float
    people: list[PersonProgress]


class AnnotationTask(Body):
    """A labelling task with its progress."""

    name: str
    description: str
    dataset: str = Field(description="NAME:VERSION labelled")
    kind: TaskKind
    label_schema: LabelSchema
    parts: dict[str, int] = Field(description="part -> records labelled from it, in record order")
    record_count: int
    content_field: str
    assignees: list[str]
    reviewers: list[str]
    created_by: str
    created: datetime | None
    progress: TaskProgress


class AnnotationTaskList(Body):
    """The project's tasks, and its members (the names assignees and reviewers are chosen from)."""

    tasks: list[AnnotationTask]
    members: list[str] | None = Field(description="null where the server has no directory of users")


class Label(Body):
    """A record's label as saved."""

    record: int
    value: dict[str, Any] = Field(description="the LabelValue saved")
    version: int
    state: LabelState
    annotator: str
    saved: datetime | None
    suggestion_run: int | None
    reviewer: str | None
    comment: str
    reviewed: datetime | None


class Suggestion(Body):
    """A pre-labelling run's answer for one record."""

    run_id: int
    value: dict[str, Any] = Field(
        description="a LabelValue; objects carry a `score` each when the model gave one"
    )
    score: float | None
    uncertainty: float = Field(description="1 - score: queues ordered by uncertainty show the highest first")
    model_version: str = Field(description="NAME:VERSION of the model that answered")
    created: datetime | None


class AnnotationRecord(Body):
    """One record of a task with what annotators see: its fields, its label and its suggestion."""

    record: int
    part: str
    index: int = Field(description="the record's index in its part")
    assignee: str | None
    fields: dict[str, Any] = Field(
        description="the record's fields; bytes are BytesRef objects with the URL of their content"
    )
    label: Label | None
    suggestion: Suggestion | None


class QueueEntry(Body):
    """A record in a queue."""

    record: int
    part: str
    index: int
    state: RecordState
    assignee: str | None
    annotator: str | None
    uncertainty: float | None


class RecordQueue(Body):
    """A page of a task's records in the order asked for."""

    records: list[QueueEntry]
    next: str | None = Field(description="pass as `after` for the next page (null: no more)")


class LabelEvent(Body):
    """One step of a label's history."""

    version: int
    action: Literal["saved", "imported", "accepted", "rejected"]
    user: str
    at: datetime | None
    value: dict[str, Any] | None = Field(description="the value saved or imported")
    comment: str
    suggestion_run: int | None = Field(description="the pre-labelling run whose suggestion was taken")
    suggestion_model: str | None = Field(description="NAME:VERSION of the model that suggested it")
    suggestion_score: float | None


class LabelHistory(Body):
    """Every step of one record's label, oldest first."""

    record: int
    events: list[LabelEvent]


class LabelImport(Body):
    """What an import of labels did."""

    format: ExportFormat
    found: int = Field(description="images with labels in the upload")
    imported: int = Field(description="records labelled from it")
    kept: int = Field(description="records that had a label already (left as they were)")
    unmatched: list[str] = Field(description="paths of the upload that no record of the task has (first 100)")
    unmatched_count: int
