"""Export to COCO, VOC, YOLO and Labelme, and import back: boxes and polygons round-trip into another task."""

from __future__ import annotations

import io
import json
import zipfile

import pytest

from kpl_lab.annotation import formats, labels, tasks
from kpl_lab.api.annotation import ExportFormat, LabelRequest, ReviewRequest, TaskKind
from kpl_lab.errors import BadRequest

from .conftest import task_request

pytestmark = pytest.mark.databases

BOX = {"type": "box", "class_name": "red", "subclass": "dark", "xmin": 2, "ymin": 1, "xmax": 10, "ymax": 9}
POLYGON = {"type": "polygon", "class_name": "green", "points": [[1, 1], [12, 2], [6, 10]]}


def label(platform, task, record, value, accept=True):
    saved = labels.save(platform, "default", task, record, LabelRequest(value=value, version=0), "ann", False)
    if accept:
        review = ReviewRequest(decision="accept", version=saved.version)
        labels.review(platform, "default", task, record, review, "rev", False)


def stored(platform, task, record):
    return labels.show_record(platform, "default", task, record, "/kpl/api").label


def import_zip(platform, tmp_path, task, form, data):
    upload = tmp_path / f"{task}-{form.value}.zip"
    upload.write_bytes(data)
    return formats.import_labels(platform, "default", task, form, upload, "ann", False)


@pytest.mark.parametrize(
    ("form", "kind", "shapes", "files"),
    [
        (ExportFormat.coco, TaskKind.boxes, [BOX], ["annotations/instances.json"]),
        (
            ExportFormat.voc,
            TaskKind.boxes,
            [BOX],
            ["Annotations/train/img1.xml", "Annotations/test/img7.xml"],
        ),
        (
            ExportFormat.yolo,
            TaskKind.boxes,
            [BOX],
            ["classes.txt", "labels/train/img1.txt", "labels/test/img7.txt"],
        ),
        (ExportFormat.labelme, TaskKind.boxes, [BOX], ["train/img1.json", "test/img7.json"]),
        (ExportFormat.coco, TaskKind.polygons, [POLYGON], ["annotations/instances.json"]),
        (
            ExportFormat.yolo,
            TaskKind.polygons,
            [POLYGON],
            ["classes.txt", "labels/train/img1.txt", "labels/test/img7.txt"],
        ),
        (ExportFormat.labelme, TaskKind.polygons, [POLYGON], ["train/img1.json", "test/img7.json"]),
    ],
)
def test_an_export_imports_back_into_another_task(platform, images, tmp_path, form, kind, shapes, files):
    tasks.create(platform, "default", task_request("source", kind), "ann", None)
    tasks.create(platform, "default", task_request("copy", kind), "ann", None)
    label(platform, "source", 1, {"objects": shapes, "width": 16, "height": 12})
    label(platform, "source", 7, {"objects": shapes})  # no size saved: read from the image (16 x 12)
    label(platform, "source", 3, {"objects": shapes}, accept=False)  # not accepted: not exported
    data = formats.export(platform, "default", "source", form)
    assert sorted(zipfile.ZipFile(io.BytesIO(data)).namelist()) == sorted(files)
    label(platform, "copy", 7, {"objects": []})  # a record labelled already keeps its label
    done = import_zip(platform, tmp_path, "copy", form, data)
    assert (done.found, done.imported, done.kept, done.unmatched) == (2, 1, 1, [])
    copied = stored(platform, "copy", 1)
    assert copied.state == "labelled" and copied.annotator == "ann"
    (shape,) = copied.value["objects"]
    expected = shapes[0]
    assert shape["type"] == expected["type"] and shape["class_name"] == expected["class_name"]
    if expected["type"] == "box":
        assert [round(shape[k], 3) for k in ("xmin", "ymin", "xmax", "ymax")] == [2, 1, 10, 9]
    else:
        assert [[round(v, 3) for v in p] for p in shape["points"]] == expected["points"]
    if form is not ExportFormat.yolo and expected.get("subclass"):
        assert shape["subclass"] == "dark"
    (event,) = labels.history(platform, "default", "copy", 1).events
    assert (event.action, event.user) == ("imported", "ann")
    assert formats.export(platform, "default", "copy", form, every=True)  # `all`: labelled ones too


def test_a_format_refuses_a_kind_it_cannot_hold(platform, images):
    tasks.create(platform, "default", task_request(), "ann", None)
    with pytest.raises(BadRequest, match="voc holds boxes, ocr labels, not image_class .publish") as refused:
        formats.export(platform, "default", "colours", ExportFormat.voc)
    assert refused.value.field == "format"


def test_an_import_names_the_file_and_the_class_it_refuses(platform, images, tmp_path):
    tasks.create(platform, "default", task_request("boxes", TaskKind.boxes), "ann", None)
    shapes = [{"label": "purple", "points": [[1, 1], [4, 4]], "shape_type": "rectangle"}]
    document = {"shapes": shapes, "imagePath": "img2.png", "imageWidth": 16, "imageHeight": 12}
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("train/img2.json", json.dumps(document))
        archive.writestr("elsewhere/nothing.json", json.dumps({**document, "imagePath": "nothing.png"}))
    with pytest.raises(
        BadRequest, match=r"train/img2.png: value.objects.0.class_name: 'purple' is not a class"
    ):
        import_zip(platform, tmp_path, "boxes", ExportFormat.labelme, out.getvalue())
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("a.json", "{not json")
    with pytest.raises(BadRequest, match="a.json: bad JSON") as refused:
        import_zip(platform, tmp_path, "boxes", ExportFormat.labelme, out.getvalue())
    assert refused.value.field == "body"


def test_an_import_lists_what_matched_no_record(platform, images, tmp_path):
    tasks.create(platform, "default", task_request("boxes", TaskKind.boxes), "ann", None)
    xml = "<annotation><filename>{}</filename><object><name>red</name><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>3</xmax><ymax>3</ymax></bndbox></object></annotation>"
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("Annotations/img4.xml", xml.format("img4.png"))
        archive.writestr("Annotations/cat.xml", xml.format("cat.jpg"))
    done = import_zip(platform, tmp_path, "boxes", ExportFormat.voc, out.getvalue())
    assert (done.imported, done.unmatched, done.unmatched_count) == (1, ["cat.jpg"], 1)
    assert stored(platform, "boxes", 4).value["objects"][0]["xmax"] == 3
