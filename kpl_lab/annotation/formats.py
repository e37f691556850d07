"""Export a task's labels as COCO, Pascal VOC, YOLO or Labelme files in a zip, and import labels of those formats.

Files are named after the record's `path` field (`PART/INDEX` when the dataset has none), so an
export imports back into the same task. Each format carries what it can: COCO boxes, polygons,
RLE masks and keypoints; VOC boxes; YOLO boxes and polygons (normalised, one line each); Labelme
rectangles and polygons. OCR text goes in COCO's `attributes.text`, VOC's `<text>` and Labelme's
`description`. A format refuses a kind it cannot hold (400 naming `format`), and the class kinds
are published as dataset versions instead.
"""

from __future__ import annotations

import io
import json
import posixpath
import tempfile
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from sqlalchemy import select

from ..api.annotation import ExportFormat, LabelImport, LabelValue, TaskKind
from ..catalog.annotation import AnnotationEvent, AnnotationLabel
from ..catalog.datasets_view import open_reader
from ..catalog.models import utcnow
from ..errors import BadRequest, validation_error
from .tasks import find, locate, may_label
from .values import check_value

if TYPE_CHECKING:
    from ..platform import Platform

# the kinds each format holds
KINDS = {
    ExportFormat.coco: (TaskKind.boxes, TaskKind.polygons, TaskKind.masks, TaskKind.keypoints, TaskKind.ocr),
    ExportFormat.voc: (TaskKind.boxes, TaskKind.ocr),
    ExportFormat.yolo: (TaskKind.boxes, TaskKind.polygons, TaskKind.ocr),
    ExportFormat.labelme: (TaskKind.boxes, TaskKind.polygons, TaskKind.ocr),
}
UNMATCHED_SHOWN = 100


def check_kind(form: ExportFormat, kind: TaskKind) -> None:
    """Refuse a format that cannot hold a task's kind."""
    if kind not in KINDS[form]:
        held = ", ".join(k.value for k in KINDS[form])
        raise BadRequest(
            f"format: {form.value} holds {held} labels, not {kind.value}"
            + (" (publish a class task as a dataset version instead)" if "class" in kind.value else ""),
            field="format",
        )


def record_names(platform: Platform, project: str, task) -> list[str]:
    """Return each record's file name: its `path` field, or PART/INDEX."""
    _, view = platform.catalog.open_dataset(
        project, task.dataset_version.dataset.name, task.dataset_version.version
    )
    schemas = view.schemas()
    names: list[str] = []
    for part, count in task.parts:
        if schemas[part].get("path") == "String":
            paths: list = []
            for batch in open_reader(view.folder, part, ("path",)).iter_batches():  # a column, not rows
                paths += batch.column(0).to_pylist()
                if len(paths) >= count:
                    break
            names += [
                str(p or "").replace("\\", "/").lstrip("/") or f"{part}/{i}"
                for i, p in enumerate(paths[:count])
            ]
        else:
            names += [f"{part}/{i}" for i in range(count)]
    return names


def _image_size(platform: Platform, project: str, task, record: int) -> tuple[int, int]:
    """Return (width, height) of a record's image, read from its content field."""
    from PIL import Image

    _, view = platform.catalog.open_dataset(
        project, task.dataset_version.dataset.name, task.dataset_version.version
    )
    part, index = locate(task, record)
    data, _ = view.field(part, index, task.content_field)
    with Image.open(io.BytesIO(data)) as image:
        return image.size


# export


def export(platform: Platform, project: str, name: str, form: ExportFormat, every: bool = False) -> bytes:
    """Return a zip of the task's accepted labels (`every`: every saved label) in a format; dropped ones never."""
    with platform.session() as session:
        task = find(session, project, name)
        check_kind(form, TaskKind(task.kind))
        states = ("labelled", "accepted") if every else ("accepted",)
        rows = session.execute(
            select(AnnotationLabel.record, AnnotationLabel.value)
            .where(
                AnnotationLabel.task_id == task.id,
                AnnotationLabel.state.in_(states),
                AnnotationLabel.dropped.is_(False),
            )
            .order_by(AnnotationLabel.record)
        ).all()
        _ = task.dataset_version.dataset.name  # loaded now: read after the session
    names = record_names(platform, project, task)
    classes = [c["name"] for c in task.label_schema["classes"]]
    labelled = []
    for record, value in rows:
        if value.get("width") is None or value.get("height") is None:
            width, height = _image_size(platform, project, task, record)
            value = {**value, "width": width, "height": height}
        labelled.append((names[record], value))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data in WRITERS[form](task, classes, labelled):
            archive.writestr(path, data)
    return out.getvalue()


def _stem(name: str) -> str:
    return posixpath.splitext(name)[0]


def _coco(task, classes: list[str], labelled: list[tuple[str, dict]]):
    ids = {name: i + 1 for i, name in enumerate(classes)}
    categories = [{"id": ids[c], "name": c, "supercategory": ""} for c in classes]
    if TaskKind(task.kind) is TaskKind.keypoints:
        for category in categories:
            category |= {
                "keypoints": task.label_schema["keypoints"],
                "skeleton": task.label_schema["skeleton"],
            }
    images, annotations = [], []
    for image_id, (name, value) in enumerate(labelled, start=1):
        images.append({"id": image_id, "file_name": name, "width": value["width"], "height": value["height"]})
        for shape in value["objects"]:
            box = _bbox(shape)
            item: dict[str, Any] = {
                "id": len(annotations) + 1,
                "image_id": image_id,
                "category_id": ids[shape["class_name"]],
                "bbox": [box[0], box[1], box[2] - box[0], box[3] - box[1]],
                "area": (box[2] - box[0]) * (box[3] - box[1]),
                "iscrowd": 0,
                "segmentation": [],
            }
            if shape["type"] == "polygon":
                item["segmentation"] = [[v for point in shape["points"] for v in point]]
            elif shape["type"] == "mask":
                item["segmentation"] = {"size": shape["rle"]["size"], "counts": shape["rle"]["counts"]}
            elif shape["type"] == "keypoints":
                item["keypoints"] = [v for point in shape["points"] for v in point]
                item["num_keypoints"] = sum(1 for point in shape["points"] if point[2] > 0)
            attributes = {k: shape[k] for k in ("subclass", "text") if shape.get(k) is not None}
            if attributes:
                item["attributes"] = attributes
            annotations.append(item)
    document = {"images": images, "annotations": annotations, "categories": categories}
    yield "annotations/instances.json", json.dumps(document, indent=1)


def _voc(task, classes: list[str], labelled: list[tuple[str, dict]]):
    for name, value in labelled:
        root = ET.Element("annotation")
        ET.SubElement(root, "filename").text = name
        size = ET.SubElement(root, "size")
        for tag, number in (("width", value["width"]), ("height", value["height"]), ("depth", 3)):
            ET.SubElement(size, tag).text = str(number)
        for shape in value["objects"]:
            obj = ET.SubElement(root, "object")
            ET.SubElement(obj, "name").text = shape["class_name"]
            if shape.get("subclass"):
                ET.SubElement(obj, "subclass").text = shape["subclass"]
            if shape.get("text") is not None:
                ET.SubElement(obj, "text").text = shape["text"]
            ET.SubElement(obj, "difficult").text = "0"
            box = ET.SubElement(obj, "bndbox")
            for tag, number in zip(("xmin", "ymin", "xmax", "ymax"), _bbox(shape), strict=True):
                ET.SubElement(box, tag).text = f"{number:g}"
        yield f"Annotations/{_stem(name)}.xml", ET.tostring(root, encoding="unicode")


def _yolo(task, classes: list[str], labelled: list[tuple[str, dict]]):
    index = {name: i for i, name in enumerate(classes)}
    yield "classes.txt", "".join(c + "\n" for c in classes)
    for name, value in labelled:
        width, height = value["width"], value["height"]
        lines = []
        for shape in value["objects"]:
            if shape["type"] == "polygon":
                numbers = [v for x, y in shape["points"] for v in (x / width, y / height)]
            else:
                xmin, ymin, xmax, ymax = _bbox(shape)
                numbers = [
                    (xmin + xmax) / 2 / width,
                    (ymin + ymax) / 2 / height,
                    (xmax - xmin) / width,
                    (ymax - ymin) / height,
                ]
            lines.append(" ".join([str(index[shape["class_name"]]), *(f"{v:.6f}" for v in numbers)]))
        yield f"labels/{_stem(name)}.txt", "".join(line + "\n" for line in lines)


def _labelme(task, classes: list[str], labelled: list[tuple[str, dict]]):
    for name, value in labelled:
        shapes = []
        for shape in value["objects"]:
            if shape["type"] == "box":
                points, kind = [[shape["xmin"], shape["ymin"]], [shape["xmax"], shape["ymax"]]], "rectangle"
            else:
                points, kind = [list(p) for p in shape["points"]], "polygon"
            shapes.append(
                {
                    "label": shape["class_name"],
                    "points": points,
                    "shape_type": kind,
                    "group_id": None,
                    "description": shape.get("text") or "",
                    "flags": {shape["subclass"]: True} if shape.get("subclass") else {},
                }
            )
        document = {
            "version": "5.2.1",
            "flags": {},
            "shapes": shapes,
            "imagePath": posixpath.basename(name),
            "imageData": None,
            "imageWidth": value["width"],
            "imageHeight": value["height"],
        }
        yield f"{_stem(name)}.json", json.dumps(document, indent=1)


def _bbox(shape: dict) -> tuple[float, float, float, float]:
    if shape["type"] == "box":
        return shape["xmin"], shape["ymin"], shape["xmax"], shape["ymax"]
    if shape["type"] == "mask":
        from .publish import _mask_extent

        (top, bottom), (left, right) = _mask_extent(shape["rle"])
        return left, top, right + 1, bottom + 1
    points = [p for p in shape["points"] if len(p) < 3 or p[2] > 0] or [[0, 0]]
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    return min(xs), min(ys), max(xs), max(ys)


WRITERS = {
    ExportFormat.coco: _coco,
    ExportFormat.voc: _voc,
    ExportFormat.yolo: _yolo,
    ExportFormat.labelme: _labelme,
}


# import


def _shape(kind: TaskKind, class_name: str, box=None, points=None, text=None, subclass=None) -> dict:
    """Return a shape of the task's kind from a box or points read from a file."""
    shape: dict[str, Any] = {"class_name": class_name}
    if subclass:
        shape["subclass"] = subclass
    if kind is TaskKind.ocr:
        shape["text"] = text or ""
    if points is not None and kind in (TaskKind.polygons, TaskKind.masks, TaskKind.ocr) and len(points) >= 3:
        return shape | {"type": "polygon", "points": points}
    if box is None:
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        box = (min(xs), min(ys), max(xs), max(ys))
    return shape | {"type": "box", "xmin": box[0], "ymin": box[1], "xmax": box[2], "ymax": box[3]}


def _read_coco(kind: TaskKind, files: dict[str, bytes], sizes) -> dict[str, dict]:
    found: dict[str, dict] = {}
    for path, data in files.items():
        if not path.endswith(".json"):
            continue
        doc = _json(path, data)
        if not (
            isinstance(doc, dict)
            and isinstance(doc.get("images"), list)
            and isinstance(doc.get("annotations"), list)
        ):
            continue
        names = {
            c.get("id"): str(c.get("name", "")) for c in doc.get("categories") or [] if isinstance(c, dict)
        }
        images = {}
        for image in doc["images"]:
            if isinstance(image, dict) and isinstance(image.get("file_name"), str):
                images[image.get("id")] = image["file_name"]
                found[image["file_name"]] = {
                    "objects": [],
                    "width": image.get("width"),
                    "height": image.get("height"),
                }
        for i, ann in enumerate(doc["annotations"]):
            where = f"{path}: annotations.{i}"
            if not isinstance(ann, dict) or ann.get("image_id") not in images:
                raise BadRequest(
                    f"{where}: image_id {ann.get('image_id') if isinstance(ann, dict) else ann!r} is not an image of the file",
                    field="body",
                )
            if ann.get("category_id") not in names:
                raise BadRequest(
                    f"{where}: category_id {ann.get('category_id')!r} is not in categories", field="body"
                )
            value = found[images[ann["image_id"]]]
            attributes = ann.get("attributes") if isinstance(ann.get("attributes"), dict) else {}
            common = {"text": attributes.get("text"), "subclass": attributes.get("subclass")}
            segmentation, bbox = ann.get("segmentation"), ann.get("bbox") or [0, 0, 0, 0]
            name = names[ann["category_id"]]
            if kind is TaskKind.keypoints and isinstance(ann.get("keypoints"), list):
                flat = ann["keypoints"]
                points = [flat[j : j + 3] for j in range(0, len(flat) - 2, 3)]
                value["objects"].append({"type": "keypoints", "class_name": name, "points": points})
            elif kind is TaskKind.masks and isinstance(segmentation, dict):
                value["objects"].append({"type": "mask", "class_name": name, "rle": segmentation})
            elif isinstance(segmentation, list) and segmentation and isinstance(segmentation[0], list):
                flat = segmentation[0]
                points = [flat[j : j + 2] for j in range(0, len(flat) - 1, 2)]
                value["objects"].append(_shape(kind, name, points=points, **common))
            else:
                x, y, w, h = bbox
                value["objects"].append(_shape(kind, name, box=(x, y, x + w, y + h), **common))
    return found


def _read_voc(kind: TaskKind, files: dict[str, bytes], sizes) -> dict[str, dict]:
    from kpl_dataset.importers.safety import ImportFailed
    from kpl_dataset.importers.xmlsafe import parse_xml

    found = {}
    for path, data in files.items():
        if not path.endswith(".xml"):
            continue
        try:
            root = parse_xml(data, path)
        except ImportFailed as error:
            raise BadRequest(str(error), field="body") from None
        if root.tag != "annotation":
            continue
        filename = (root.findtext("filename") or posixpath.basename(_stem(path))).strip()
        objects = []
        for i, obj in enumerate(root.iter("object")):
            box = obj.find("bndbox")
            try:
                numbers = tuple(float(box.findtext(t)) for t in ("xmin", "ymin", "xmax", "ymax"))
            except (AttributeError, TypeError, ValueError):
                raise BadRequest(
                    f"{path}: object {i}: bndbox needs xmin, ymin, xmax and ymax numbers", field="body"
                ) from None
            objects.append(
                _shape(
                    kind,
                    (obj.findtext("name") or "").strip(),
                    box=numbers,
                    text=obj.findtext("text"),
                    subclass=obj.findtext("subclass"),
                )
            )
        size = root.find("size")
        width = int(float(size.findtext("width") or 0)) if size is not None else 0
        height = int(float(size.findtext("height") or 0)) if size is not None else 0
        found[filename] = {"objects": objects, "width": width or None, "height": height or None}
    return found


def _read_yolo(kind: TaskKind, files: dict[str, bytes], sizes) -> dict[str, dict]:
    classes_file = next(
        (data for path, data in files.items() if posixpath.basename(path) == "classes.txt"), None
    )
    classes = (
        None
        if classes_file is None
        else [line.strip() for line in _text("classes.txt", classes_file).splitlines() if line.strip()]
    )
    found = {}
    for path, data in files.items():
        if not path.endswith(".txt") or posixpath.basename(path) == "classes.txt":
            continue
        stem = _stem(path.removeprefix("labels/"))
        width, height = sizes(stem)
        objects = []
        for n, line in enumerate(_text(path, data).splitlines(), start=1):
            words = line.split()
            if not words:
                continue
            try:
                index, numbers = int(words[0]), [float(w) for w in words[1:]]
            except ValueError:
                raise BadRequest(
                    f"{path}, line {n}: expected CLASS X Y W H (or CLASS X1 Y1 X2 Y2 ...)", field="body"
                ) from None
            names = classes if classes is not None else sizes.classes
            if not 0 <= index < len(names) or len(numbers) < 4 or len(numbers) % 2:
                raise BadRequest(
                    f"{path}, line {n}: class {index} or its {len(numbers)} numbers do not fit", field="body"
                )
            if len(numbers) == 4:
                cx, cy, w, h = numbers
                box = (
                    (cx - w / 2) * width,
                    (cy - h / 2) * height,
                    (cx + w / 2) * width,
                    (cy + h / 2) * height,
                )
                objects.append(_shape(kind, names[index], box=box))
            else:
                points = [[numbers[j] * width, numbers[j + 1] * height] for j in range(0, len(numbers), 2)]
                objects.append(_shape(kind, names[index], points=points))
        found[stem] = {"objects": objects, "width": width, "height": height}
    return found


def _read_labelme(kind: TaskKind, files: dict[str, bytes], sizes) -> dict[str, dict]:
    found = {}
    for path, data in files.items():
        if not path.endswith(".json"):
            continue
        doc = _json(path, data)
        if not isinstance(doc, dict) or not isinstance(doc.get("shapes"), list):
            continue
        objects = []
        for i, shape in enumerate(doc["shapes"]):
            points = shape.get("points") if isinstance(shape, dict) else None
            if not isinstance(points, list) or not points:
                raise BadRequest(f"{path}: shapes.{i}: points missing or empty", field="body")
            flags = [k for k, v in (shape.get("flags") or {}).items() if v]
            common = {"text": shape.get("description"), "subclass": flags[0] if flags else None}
            if shape.get("shape_type") == "rectangle" and len(points) == 2:
                (x1, y1), (x2, y2) = points
                objects.append(
                    _shape(
                        kind,
                        str(shape.get("label", "")),
                        box=(min(x1, x2), min(y1, y2), max(x1, x2), max(y1, y2)),
                        **common,
                    )
                )
            else:
                objects.append(_shape(kind, str(shape.get("label", "")), points=points, **common))
        image = str(doc.get("imagePath") or posixpath.basename(_stem(path)))
        name = posixpath.normpath(posixpath.join(posixpath.dirname(path), image.replace("\\", "/")))
        found[name] = {"objects": objects, "width": doc.get("imageWidth"), "height": doc.get("imageHeight")}
    return found


READERS = {
    ExportFormat.coco: _read_coco,
    ExportFormat.voc: _read_voc,
    ExportFormat.yolo: _read_yolo,
    ExportFormat.labelme: _read_labelme,
}


def _json(path: str, data: bytes) -> Any:
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise BadRequest(f"{path}: bad JSON: {error}", field="body") from None


def _text(path: str, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest(f"{path}: not UTF-8 text", field="body") from None


class _Sizes:
    """Image sizes of records by file stem, read when a YOLO file needs them; and the task's classes."""

    def __init__(
        self, platform: Platform, project: str, task, by_stem: dict[str, int], classes: list[str]
    ) -> None:
        self.platform, self.project, self.task, self.by_stem, self.classes = (
            platform,
            project,
            task,
            by_stem,
            classes,
        )

    def __call__(self, stem: str) -> tuple[int, int]:
        record = self.by_stem.get(stem)
        if record is None:
            return 1, 1  # unmatched: counted as such, never saved
        return _image_size(self.platform, self.project, self.task, record)


def _match(by_base: dict[str, list[tuple[int, str]]], wanted: str) -> int | None:
    """Return the record whose file name ends with `wanted` (path-wise), else the one with its base name;
    None when none or several do. `by_base`: base name -> (record, file name)."""
    wanted = wanted.replace("\\", "/").lstrip("/")
    candidates = by_base.get(posixpath.basename(wanted), [])
    hits = [r for r, name in candidates if ("/" + name).endswith("/" + wanted)]
    if len(hits) == 1:
        return hits[0]
    return candidates[0][0] if len(candidates) == 1 else None


def import_labels(
    platform: Platform, project: str, name: str, form: ExportFormat, upload: Path, user: str, admin: bool
) -> LabelImport:
    """Label the task's unlabelled records from an uploaded zip or tar of a format; keep the labels already saved."""
    from kpl_dataset.importers.archive import open_source
    from kpl_dataset.importers.safety import ImportFailed, Limits

    with platform.session() as session:
        task = find(session, project, name)
        may_label(task, user, admin)
        kind = TaskKind(task.kind)
        check_kind(form, kind)
        _ = task.dataset_version.dataset.name  # loaded now: read after the session
    names = record_names(platform, project, task)
    try:
        with open_source(upload, Limits(max_total_size=1 << 30, max_file_size=256 << 20)) as source:
            files = {
                e.path: source.read(e) for e in source.entries if e.path.endswith((".json", ".xml", ".txt"))
            }
    except ImportFailed as error:
        raise BadRequest(f"body: {error}", field="body") from None
    stems, by_base = {}, {}
    for record, file in enumerate(names):
        by_base.setdefault(posixpath.basename(file), []).append((record, file))
        stems.setdefault(_stem(file), record)
        stems.setdefault(posixpath.basename(_stem(file)), record)
    classes = [c["name"] for c in task.label_schema["classes"]]
    found = READERS[form](kind, files, _Sizes(platform, project, task, stems, classes))
    values: dict[int, dict] = {}
    unmatched = []
    for file, raw in sorted(found.items()):
        record = stems.get(file) if form is ExportFormat.yolo else _match(by_base, file)
        if record is None:
            unmatched.append(file)
            continue
        raw = {k: v for k, v in raw.items() if v is not None}
        try:
            value = LabelValue.model_validate(raw)
        except ValidationError as error:
            shown = validation_error(error)
            raise BadRequest(f"{file}: {shown.message}", field="body") from None
        try:
            values[record] = check_value(kind, task.label_schema, value)
        except BadRequest as error:
            raise BadRequest(f"{file}: {error.message}", field="body") from None
    imported = kept = 0
    with platform.session(immediate=True) as session:
        present = set(
            session.scalars(
                select(AnnotationLabel.record).where(
                    AnnotationLabel.task_id == task.id, AnnotationLabel.record.in_(list(values))
                )
            )
        )
        now = utcnow()
        for record, value in sorted(values.items()):
            if record in present:
                kept += 1
                continue
            session.add(
                AnnotationLabel(
                    task_id=task.id, record=record, value=value, version=1, annotator=user, saved=now
                )
            )
            session.add(
                AnnotationEvent(
                    task_id=task.id,
                    record=record,
                    version=1,
                    action="imported",
                    user=user,
                    at=now,
                    value=value,
                )
            )
            imported += 1
    return LabelImport(
        format=form,
        found=len(found),
        imported=imported,
        kept=kept,
        unmatched=unmatched[:UNMATCHED_SHOWN],
        unmatched_count=len(unmatched),
    )


def import_bytes(
    platform: Platform, project: str, name: str, form: ExportFormat, data: bytes, user: str, admin: bool
) -> LabelImport:
    """Import labels from an upload's bytes (written to a temporary file for the hostile-safe reader)."""
    with tempfile.NamedTemporaryFile(suffix=".upload") as file:
        file.write(data)
        file.flush()
        return import_labels(platform, project, name, form, Path(file.name), user, admin)
