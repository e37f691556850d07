"""The seed's three fruit flows end to end, every output record checked against independent expectations."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from kpl_dataset import ReadOnlyDataset, WriteOnlyDataset
from kpl_lab.pipelines.templates import template_text
from kpl_lab.testing.fruit import RAW_TYPE

PATTERN = r"^[^/]+/(?P<type>[^/]+)/(?P<id>[^/]+)\.[A-Za-z]+$"


def _extract(record: dict) -> dict:
    m = re.search(PATTERN, record["path"])
    return {**record, "type": m["type"] if m else None, "id": m["id"] if m else None}


def _without_train(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith(("train:", "model:")))


def test_segmentation_flow_joins_masks_and_leaves_missing_ones_null(lab, fruit):
    from kpl_lab.pipelines.runner import PipelineRunner

    files = fruit.files("segmentation", 30)
    fruit.add("fruit-segmentation", files)
    run = PipelineRunner(lab).run("p", template_text("segmentation"))
    assert run.state == "succeeded", [(n.node, n.state, n.log) for n in run.nodes]

    rows = [_extract(r) for r in files]
    masks = {r["id"]: r["content"] for r in rows if r["type"] == "SegmentationClass"}
    expected = [{**r, "mask": masks.get(r["id"])} for r in rows if r["type"] == "JPEGImages"]
    got = fruit.saved("fruit-segmentation-train")
    assert got == expected
    assert sum(r["mask"] is None for r in got) == 7  # every fourth of 30 images has no mask
    nodes = {n.node: n for n in run.nodes}
    assert (nodes["images"].rows_in, nodes["images"].rows_out) == (len(files), 30)
    assert nodes["save"].outputs["out"]["ref"].startswith("dataset:fruit-segmentation-train:")
    version = lab.catalog.get_dataset("p", "fruit-segmentation-train")
    assert version.lineage == {"pipeline": "fruit-segmentation", "run": run.id, "node": "save"}


def _voc(xml: bytes) -> tuple[int, int, list[dict]]:
    root = ET.fromstring(xml)
    objects = [
        {
            "name": o.findtext("name"),
            **{k: int(o.find("bndbox").findtext(k)) for k in ("xmin", "ymin", "xmax", "ymax")},
            "difficult": int(o.findtext("difficult")),
        }
        for o in root.iter("object")
    ]
    return int(root.find("size").findtext("width")), int(root.find("size").findtext("height")), objects


def test_detection_flow_joins_parsed_voc_boxes(lab, fruit):
    from kpl_lab.pipelines.runner import PipelineRunner

    files = fruit.files("detection", 25)
    fruit.add("fruit-detection", files)
    run = PipelineRunner(lab).run("p", _without_train(template_text("detection")))
    assert run.state == "succeeded", [(n.node, n.state, n.log) for n in run.nodes]

    rows = [_extract(r) for r in files]
    boxes = {r["id"]: _voc(r["content"])[2] for r in rows if r["type"] == "Annotations"}
    expected = [{**r, "object": boxes.get(r["id"])} for r in rows if r["type"] == "JPEGImages"]
    assert fruit.saved("fruit-detection-train") == expected
    assert any(r["object"] for r in expected) and any(r["object"] is None for r in expected)


def test_classification_flow_numbers_labels_trains_and_saves_the_model(lab, fruit):
    from kpl_lab.pipelines.runner import PipelineRunner

    files = fruit.files("classification", 18)
    # labels of its own (as the demo's digits have): the template derives them again from the folders
    upload = fruit.tmp_path / "upload" / "digits"
    labelled = {**RAW_TYPE, "class_name": "String", "class_id": "Int"}
    with WriteOnlyDataset(upload, "train", labelled) as writer:
        for record in files:
            writer.write({**record, "class_name": "x", "class_id": 7})
    lab.catalog.add_dataset("p", "digits", upload)
    folder = fruit.tmp_path / "image-classification"
    folder.mkdir()
    (folder / "environment.yml").write_text(
        "version: 1\nimage:\n  runs: []\ntrain:\n  resource:\n    limits:\n      cpu: 1\n      memory: 256\n"
        "  inputs:\n    - key: data\n      name: data\n    - key: checkpoint\n      name: checkpoint\n"
        "      optional: true\n  outputs:\n    - key: model\n      name: model\n  cmd: python train.py\n"
    )
    (folder / "parameter.yml").write_text("epochs: 1\n")
    (folder / "train.py").write_text(
        "import os\nimport kpl_helper as kh\nfrom kpl_dataset import ReadOnlyDataset\n"
        "data = ReadOnlyDataset(kh.io.get_input_path('data', '/nonexistent'))\n"
        "ids = sorted({(r['class_name'], r['class_id']) for r in data if r['class_id'] is not None})\n"
        "out = kh.io.get_output_path('model', '/nonexistent')\n"
        "open(os.path.join(out, 'classes.txt'), 'w').write(repr(ids))\n"
        "kh.done()\n"
    )
    lab.catalog.add_algorithm("p", folder)
    run = PipelineRunner(lab).run("p", template_text("classification"))
    assert run.state == "succeeded", [(n.node, n.state, n.log) for n in run.nodes]

    names = sorted({r["path"].split("/")[1] for r in files if r["path"].count("/") == 2})
    expected = []
    for r in files:
        m = re.search(r"^[^/]+/(?P<class_name>[^/]+)/(?P<file_name>[^/]+)\.[A-Za-z]+$", r["path"])
        cls = m["class_name"] if m else None
        expected.append(
            {
                **r,
                "class_name": cls,
                "file_name": m["file_name"] if m else None,
                "class_id": names.index(cls) if m else None,
            }
        )
    assert fruit.saved("classification-train") == expected
    saved = lab.catalog.get_dataset("p", "classification-train")
    meta = ReadOnlyDataset(lab.catalog.path(saved)).get_meta_db()
    assert meta.get("label_id.class_id") == {"field": "class_name", "labels": names}
    model = lab.catalog.get_model("p", "classifier")
    text = (lab.catalog.path(model) / "classes.txt").read_text()
    assert text == repr(sorted({(n, i) for i, n in enumerate(names)}))
    nodes = {n.node: n for n in run.nodes}
    assert nodes["train"].job_id and nodes["train"].state == "succeeded"
    # a model is no table: no row count (the editor showed "0 rows" on train and model)
    assert nodes["train"].rows_out is None and nodes["model"].rows_out is None
