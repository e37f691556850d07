"""Validation: schemas along the edges and one test per kind of mistake, each naming node, parameter and line."""

from __future__ import annotations

import pytest
import yaml

from kpl_lab.errors import BadRequest
from kpl_lab.pipelines import parse
from kpl_lab.pipelines.format import PipelineSyntaxError
from kpl_lab.pipelines.runner import PipelineRunner
from kpl_lab.pipelines.validate import PlatformCatalog, validate

ISSUE_FILE = """\
version: 1
name: fruit-detection
nodes:
  raw:         {type: dataset, dataset: fruit-detection}          # name or name:version
  extract:     {type: regex_extract, input: raw, field: path,
                pattern: '^[^/]+/(?P<type>[^/]+)/(?P<id>[^/]+)\\.[A-Za-z]+$'}
  images:      {type: select, input: extract, where: "type = 'JPEGImages'"}
  annotations: {type: select, input: extract, where: "type = 'Annotations'"}
  boxes:       {type: parse_voc, input: annotations, field: content}   # adds `object`
  joined:      {type: left_join, left: images, right: boxes, on: id, fields: [object]}
  save:        {type: save_dataset, input: joined, name: fruit-detection-train}
"""


@pytest.fixture
def check(lab, fruit):
    fruit.add("fruit-detection", fruit.files("detection", 4))
    return lambda text: validate(parse(text), PlatformCatalog(lab, "p"))


def _problems(result) -> list[str]:
    return [str(p) for p in result.problems]


def _with(extra: str) -> str:
    return ISSUE_FILE + extra


def test_the_issue_file_validates_with_schemas_on_every_node(check):
    result = check(ISSUE_FILE)
    assert result.ok, _problems(result)
    joined = result.nodes["joined"].to_dict()
    assert [f["name"] for f in joined["outputs"]["out"]["fields"]] == [
        "path",
        "contentType",
        "content",
        "type",
        "id",
        "object",
    ]
    assert joined["outputs"]["out"]["fields"][-1] == {
        "name": "object",
        "type": "List[Dict{name: String, xmin: Int, ymin: Int, xmax: Int, ymax: Int, difficult: Int}]",
        "nullable": True,
    }
    assert [f["name"] for f in joined["inputs"]["right"]["fields"]][-3:] == ["object", "width", "height"]
    assert result.order.index("raw") < result.order.index("extract") < result.order.index("joined")


def test_join_key_missing_on_the_right_names_node_parameter_and_line(check):
    result = check(ISSUE_FILE.replace("right: boxes, on: id", "right: raw, on: id"))
    assert _problems(result) == [
        'line 10: joined.on: field "id" is not in right input "raw" (fields: path, contentType, content)'
    ]


def test_clashing_join_fields_are_refused(check):
    result = check(ISSUE_FILE.replace("fields: [object]}", "fields: [object, path]}"))
    assert _problems(result) == [
        'line 10: joined.fields: field "path" is in both inputs; rename it in one of them first'
    ]


def test_cycles_and_dangling_inputs(check):
    result = check(
        _with(
            '  a: {type: select, input: b, where: "true"}\n  b: {type: select, input: a, where: "true"}\n'
            '  c: {type: select, input: ghost, where: "true"}\n'
        )
    )
    problems = _problems(result)
    assert "line 12: a: is in a cycle: a → b → a" in problems
    assert "line 13: b: is in a cycle: b → a → b" in problems
    result = check(
        _with(
            '  d: {type: select, input: e, where: "true"}\n  e: {type: select, input: d, where: "true"}\n'
            '  f: {type: select, input: e, where: "true"}\n'
        )
    )
    assert "line 14: f: reads from a cycle, so it can never run" in _problems(result)
    assert any(p.startswith('line 14: c.input: node "ghost" does not exist') for p in problems)


def test_unknown_dataset_type_and_parameters(check):
    result = check(
        ISSUE_FILE.replace("dataset: fruit-detection}", "dataset: no-such}")
        + "  x: {type: frobnicate}\n  y: {type: select, input: images, wher: 'true'}\n"
    )
    problems = _problems(result)
    assert "line 4: raw.dataset: dataset 'no-such' not found in project 'p'" in problems
    assert any(p.startswith("line 12: x.type: 'frobnicate' is not a node type") for p in problems)
    assert "line 13: y.wher: unknown parameter" in problems
    assert "line 13: y.where: Field required" in problems


def test_bad_expressions_and_patterns(check):
    result = check(
        _with(
            "  a: {type: select, input: extract, where: \"kind = 'x'\"}\n"
            '  b: {type: select, input: extract, where: "true; DROP TABLE input"}\n'
            "  c: {type: regex_extract, input: raw, field: path, pattern: '(unclosed'}\n"
            "  d: {type: regex_extract, input: raw, field: path, pattern: 'no groups'}\n"
            "  e: {type: regex_extract, input: raw, field: content, pattern: '(?P<x>.)'}\n"
            '  f: {type: select, input: extract, where: "path"}\n'
        )
    )
    problems = _problems(result)
    assert any(p.startswith('line 12: a.where: Referenced column "kind" not found') for p in problems)
    assert 'line 13: b.where: syntax error at or near ";"' in problems
    assert any(p.startswith("line 14: c.pattern: not a regular expression") for p in problems)
    assert "line 15: d.pattern: has no named group (?P<name>…) to extract" in problems
    assert 'line 16: e.field: field "content" is not a String' in problems
    assert any(p.startswith("line 17: f.where: is not a boolean expression") for p in problems)


def test_expressions_cannot_read_files(check, tmp_path):
    secret = tmp_path / "secret.csv"
    secret.write_text("a\n1\n")
    result = check(
        _with(
            f"  a: {{type: select, input: extract, where: \"(SELECT count(*) FROM read_csv('{secret}')) > 0\"}}\n"
        )
    )
    assert len(result.problems) == 1 and "disabled" in result.problems[0].message


def test_algorithm_inputs_are_checked_against_environment_yml(check, lab, fruit):
    folder = fruit.tmp_path / "detector"
    folder.mkdir()
    (folder / "environment.yml").write_text(
        "version: 1\nimage:\n  runs: []\ntrain:\n  inputs:\n    - key: data\n      name: data\n"
        "    - key: checkpoint\n      name: resume from\n      optional: true\n"
        "  outputs:\n    - key: save\n      name: model\n  cmd: python train.py\n"
    )
    (folder / "train.py").write_text("")
    lab.catalog.add_algorithm("p", folder)
    result = check(
        _with(
            "  t1: {type: train, algorithm: detector, inputs: {images: save}}\n"
            "  t2: {type: train, algorithm: detector, inputs: {data: joined}}\n"
            "  t3: {type: infer, algorithm: detector, inputs: {data: save}}\n"
            "  t4: {type: train, algorithm: nobody, inputs: {data: save}}\n"
            "  m: {type: save_model, input: save, name: x}\n"
        )
    )
    problems = _problems(result)
    assert (
        "line 12: t1.inputs.images: is not an input of train in environment.yml (inputs: data, checkpoint)"
        in problems
    )
    assert "line 12: t1.inputs: environment.yml's train also needs: data" in problems  # not the optional one
    assert (
        "line 13: t2.inputs.data: a job reads catalog entries: save this input with a save_dataset node first"
        in problems
    )
    assert any(
        p.startswith("line 14: t3.algorithm: algorithm detector:") and "has no infer function" in p
        for p in problems
    )
    assert any(p.startswith("line 15: t4.algorithm: algorithm 'nobody' not found") for p in problems)
    assert "line 16: m.input: is not a model (an algorithm node's output or a model node)" in problems


def test_split_ports_must_be_named_and_ratios_add_up(check):
    result = check(
        _with(
            "  s: {type: split, input: joined, ratios: {train: 0.8, val: 0.3}}\n"
            "  t: {type: split, input: joined, ratios: {train: 0.8, val: 0.2}, seed: 3}\n"
            "  u: {type: select, input: t, where: 'true'}\n"
            "  v: {type: select, input: t.val, where: 'true'}\n"
            "  w: {type: select, input: t.test, where: 'true'}\n"
        )
    )
    problems = _problems(result)
    assert "line 12: s.ratios: fractions add up to 1.1, not 1" in problems
    assert 'line 14: u.input: node "t" has several outputs: name one (t.train, t.val)' in problems
    assert 'line 16: w.input: node "t" has no output "test" (outputs: train, val)' in problems
    assert result.nodes["v"].outputs is not None


def test_not_a_pipeline_at_all():
    with pytest.raises(PipelineSyntaxError, match="version: 2 is not supported"):
        parse("version: 2\nname: x\nnodes: {}\n")
    with pytest.raises(PipelineSyntaxError, match="line 3: not valid YAML"):
        parse("version: 1\nnodes: [\n")
    with pytest.raises(PipelineSyntaxError, match="nodes: Field required"):
        parse("version: 1\nname: x\n")


def test_a_run_of_an_invalid_pipeline_is_refused_with_every_problem(lab, fruit):
    fruit.add("fruit-detection", fruit.files("detection", 4))
    with pytest.raises(BadRequest) as err:
        PipelineRunner(lab).create("p", ISSUE_FILE.replace("on: id", "on: nid"))
    assert [f for f, _ in err.value.errors] == ["joined.on", "joined.on"]


def test_yaml_round_trip_keeps_the_join_key_named_on():
    spec = parse(ISSUE_FILE)
    again = parse(spec.to_yaml())
    assert again.nodes == spec.nodes and again.nodes["joined"]["on"] == "id"
    assert yaml.safe_load(spec.to_yaml())["nodes"]["joined"]["on"] == "id"  # YAML 1.1 readers too


def test_editor_positions_are_kept_and_checked_but_not_parameters(check):
    placed = ISSUE_FILE.replace("field: content}", "field: content, ui: {x: 120, y: -40.5}}")
    result = check(placed)
    assert result.ok, _problems(result)
    assert parse(parse(placed).to_yaml()).nodes["boxes"]["ui"] == {"x": 120, "y": -40.5}
    assert result.nodes["boxes"].params.model_dump() == check(ISSUE_FILE).nodes["boxes"].params.model_dump()
    bad = check(ISSUE_FILE.replace("field: content}", "field: content, ui: {x: left}}"))
    assert _problems(bad) == ["line 9: boxes.ui: is the editor's position {x: number, y: number}"]


def test_keep_is_offered_to_the_editors_on_fusable_nodes_and_validated(check):
    from kpl_lab.api.pipelines import node_type_body
    from kpl_lab.pipelines.nodes import NODE_TYPES

    offered = {name for name, t in NODE_TYPES.items() if "keep" in node_type_body(t).parameters["properties"]}
    assert offered == {
        "regex_extract",
        "select",
        "rename",
        "left_join",
        "shuffle",
    }  # label_id: always written
    keep = node_type_body(NODE_TYPES["select"]).parameters["properties"]["keep"]
    assert keep["type"] == "boolean" and keep["default"] is False
    kept = check(
        ISSUE_FILE.replace("where: \"type = 'JPEGImages'\"}", "where: \"type = 'JPEGImages'\", keep: true}")
    )
    assert kept.ok and kept.nodes["images"].keep, _problems(kept)
    bad = check(
        ISSUE_FILE.replace("where: \"type = 'JPEGImages'\"}", "where: \"type = 'JPEGImages'\", keep: 1}")
    )
    assert any("images.keep" in p for p in _problems(bad)), _problems(bad)


def test_the_classification_template_validates_on_what_kpl_lab_up_puts_in_the_demo(tmp_path, database_url):
    from kpl_lab.hub.up import SAMPLE_PROJECT, add_sample_data
    from kpl_lab.pipelines.templates import template_text
    from kpl_lab.platform import Platform

    assert add_sample_data(tmp_path / "home", database_url or None)
    platform = Platform(
        home=str(tmp_path / "home"), **({"database_url": database_url} if database_url else {})
    )
    try:
        result = validate(parse(template_text("classification")), PlatformCatalog(platform, SAMPLE_PROJECT))
    finally:
        platform.close()
    assert result.ok, _problems(result)
    saved = [f["name"] for f in result.nodes["save"].to_dict()["outputs"]["out"]["fields"]]
    assert saved == ["path", "contentType", "content", "class_name", "file_name", "class_id"]
    assert list(result.nodes["train"].to_dict()["outputs"]) == ["model"]
