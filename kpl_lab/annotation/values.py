"""What a task accepts: its label schema as stored, and a label value checked against its kind and classes."""

from __future__ import annotations

from ..api.annotation import (
    CLASS_KINDS,
    LabelClass,
    LabelSchema,
    LabelSchemaRequest,
    LabelValue,
    TaskKind,
)
from ..errors import BadRequest

# a colour per class in schema order where none is given (Tableau 10, then the same darker)
PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#e15759",
    "#76b7b2",
    "#59a14f",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
)
# the shapes each object kind draws
SHAPES = {
    TaskKind.boxes: ("box",),
    TaskKind.polygons: ("polygon",),
    TaskKind.masks: ("mask", "polygon"),
    TaskKind.keypoints: ("keypoints",),
    TaskKind.ocr: ("box", "polygon"),
}


def stored_schema(request: LabelSchemaRequest) -> dict:
    """Return a label schema as a task stores it: every class with its children and a colour."""
    return {
        "classes": [
            {"name": c.name, "children": list(c.children), "color": c.color or PALETTE[i % len(PALETTE)]}
            for i, c in enumerate(request.classes)
        ],
        "keypoints": list(request.keypoints),
        "skeleton": [list(pair) for pair in request.skeleton],
    }


def schema_model(stored: dict) -> LabelSchema:
    """Return a stored label schema as the answer model."""
    return LabelSchema(
        classes=[LabelClass(**c) for c in stored["classes"]],
        keypoints=stored["keypoints"],
        skeleton=[tuple(pair) for pair in stored["skeleton"]],
    )


def check_schema_for(kind: TaskKind, schema: LabelSchemaRequest, field: str = "label_schema") -> None:
    """Refuse a schema a kind cannot use: keypoints need keypoint names, and only keypoints take them."""
    if kind is TaskKind.keypoints and not schema.keypoints:
        raise BadRequest(
            f"{field}.keypoints: a keypoints task names its keypoints", field=f"{field}.keypoints"
        )
    if kind is not TaskKind.keypoints and (schema.keypoints or schema.skeleton):
        raise BadRequest(
            f"{field}.keypoints: only a keypoints task has keypoints (this is a {kind.value} task)",
            field=f"{field}.keypoints",
        )


def check_schema_keeps(old: dict, new: dict) -> None:
    """Refuse a new schema that drops a class, a second-level class or a keypoint the old one had."""
    children = {c["name"]: set(c["children"]) for c in new["classes"]}
    for c in old["classes"]:
        if c["name"] not in children:
            raise BadRequest(
                f"label_schema.classes: class {c['name']!r} is missing (classes may be added, not removed)",
                field="label_schema.classes",
            )
        lost = [child for child in c["children"] if child not in children[c["name"]]]
        if lost:
            raise BadRequest(
                f"label_schema.classes: {c['name']!r} lost its second-level class {lost[0]!r}",
                field="label_schema.classes",
            )
    if new["keypoints"][: len(old["keypoints"])] != old["keypoints"]:
        raise BadRequest(
            "label_schema.keypoints: keypoints may be added at the end, not removed or reordered",
            field="label_schema.keypoints",
        )


def _check_class(classes: dict[str, list[str]], name: str, subclass: str | None, field: str) -> None:
    if name not in classes:
        known = ", ".join(classes)
        raise BadRequest(
            f"{field}.class_name: {name!r} is not a class of this task ({known})", field=f"{field}.class_name"
        )
    if subclass is not None and subclass not in classes[name]:
        known = ", ".join(classes[name]) or "none"
        raise BadRequest(
            f"{field}.subclass: {subclass!r} is not a second-level class of {name!r} ({known})",
            field=f"{field}.subclass",
        )


def check_value(kind: TaskKind, schema: dict, value: LabelValue, field: str = "value") -> dict:
    """Refuse a value the task's kind or classes do not allow; return it as stored (JSON)."""
    classes = {c["name"]: c["children"] for c in schema["classes"]}
    if kind in CLASS_KINDS:
        if value.objects:
            raise BadRequest(
                f"{field}.objects: a {kind.value} task labels the record's class, not objects",
                field=f"{field}.objects",
            )
        if value.class_name is None:
            if not value.dropped:
                raise BadRequest(
                    f"{field}.class_name: a {kind.value} label needs a class", field=f"{field}.class_name"
                )
        else:
            _check_class(classes, value.class_name, value.subclass, field)
    else:
        if value.class_name is not None:
            raise BadRequest(
                f"{field}.class_name: a {kind.value} task labels objects; give each object its class_name",
                field=f"{field}.class_name",
            )
        allowed = SHAPES[kind]
        for i, shape in enumerate(value.objects):
            where = f"{field}.objects.{i}"
            if shape.type not in allowed:
                raise BadRequest(
                    f"{where}.type: a {kind.value} task draws {' or '.join(allowed)}, not {shape.type}",
                    field=f"{where}.type",
                )
            _check_class(classes, shape.class_name, shape.subclass, where)
            if kind is TaskKind.keypoints and len(shape.points) != len(schema["keypoints"]):
                raise BadRequest(
                    f"{where}.points: {len(shape.points)} points, the task has {len(schema['keypoints'])} keypoints "
                    f"({', '.join(schema['keypoints'])}); mark one not labelled with v = 0",
                    field=f"{where}.points",
                )
            if kind is TaskKind.ocr and shape.text is None:
                raise BadRequest(
                    f'{where}.text: an OCR box needs its text ("" when unreadable)', field=f"{where}.text"
                )
            sized = value.height is not None and value.width is not None
            if shape.type == "mask" and sized and tuple(shape.rle.size) != (value.height, value.width):
                raise BadRequest(
                    f"{where}.rle.size: {list(shape.rle.size)} is not the image's [height, width] "
                    f"[{value.height}, {value.width}]",
                    field=f"{where}.rle.size",
                )
    return value.model_dump(mode="json")
