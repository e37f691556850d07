"""The fluent Python API builds the same file as the templates, and round-trips through YAML."""

from __future__ import annotations

from kpl_lab.pipelines import parse
from kpl_lab.pipelines.builder import Pipeline
from kpl_lab.pipelines.templates import template_text

PATTERN = r"^[^/]+/(?P<type>[^/]+)/(?P<id>[^/]+)\.[A-Za-z]+$"


def test_fluent_detection_is_the_detection_template(tmp_path):
    p = Pipeline(
        "fruit-detection", "images joined with their VOC boxes, then a training job (seed 001, detection)"
    )
    extract = p.dataset("fruit-detection").regex_extract(field="path", pattern=PATTERN, id="extract")
    images = extract.select("type = 'JPEGImages'", id="images")
    boxes = extract.select("type = 'Annotations'", id="annotations").parse_voc(id="boxes")
    saved = images.left_join(boxes, on="id", fields=["object"], id="joined").save("fruit-detection-train")
    saved.train("detection", parameters={}, id="train")["model"].save("fruit-detector", id="model")
    assert p.spec().to_dict() == parse(template_text("detection")).to_dict()
    again = Pipeline.load(p.write(tmp_path / "d.kpl-pipeline.yaml"))
    assert again.to_yaml() == p.to_yaml() and again.nodes == p.nodes


def test_fluent_segmentation_chain_and_generated_ids():
    p = Pipeline("fruit-segmentation", "images joined with their masks (seed 001, semantic segmentation)")
    extract = p.dataset("fruit-segmentation").regex_extract("path", PATTERN, id="extract")
    masks = extract.select("type = 'SegmentationClass'", id="masks").rename({"content": "mask"}, id="renamed")
    extract.select("type = 'JPEGImages'", id="images").left_join(
        masks, on="id", fields=["mask"], id="joined"
    ).save("fruit-segmentation-train")
    assert p.spec().to_dict() == parse(template_text("segmentation")).to_dict()
    q = Pipeline("ids")
    raw = q.dataset("d")
    raw.select("true")
    raw.select("false")
    parts = raw.split({"train": 0.8, "val": 0.2}, seed=7)
    parts["val"].save("val-set")
    assert list(q.nodes) == ["raw", "select", "select_2", "split", "save"]
    assert q.nodes["save"] == {"type": "save_dataset", "input": "split.val", "name": "val-set"}


def test_editor_positions_survive_load_and_write(tmp_path):
    text = template_text("segmentation").replace("type: select,", "type: select, ui: {x: 10, y: 20},", 1)
    path = tmp_path / "s.kpl-pipeline.yaml"
    path.write_text(text)
    p = Pipeline.load(path)
    p["images"].select("true", id="kept")
    again = Pipeline.load(p.write(path))
    assert [n.get("ui") for n in again.nodes.values()].count({"x": 10, "y": 20}) == 1
