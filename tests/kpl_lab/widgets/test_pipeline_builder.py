"""PipelineBuilder driven like a user would: pick types, inputs and parameters, click add, save, reopen."""

from __future__ import annotations

import ipywidgets as widgets
import pytest

from kpl_lab.pipelines import Pipeline, parse
from kpl_lab.widgets import PipelineBuilder

PATTERN = r"^images/(?P<n>[0-9]+)\.png$"


def fill(builder: PipelineBuilder, type_name: str, node_id: str = "", **values: str) -> None:
    """Pick a type, type the id and parameters into the form, click add."""
    builder.type_picker.value = type_name
    builder.id_text.value = node_id
    for name, value in values.items():
        builder.fields[name].value = value
    builder.add_button.click()


def test_builds_the_same_file_as_the_python_api_and_reopens_it(kpl_server, kpl_data, tmp_path):
    builder = PipelineBuilder("shapes-png", client=kpl_server.client())
    assert list(builder.fields) == ["dataset", "part"]  # the form follows the type's parameters
    fill(builder, "dataset", "raw", dataset="shapes")
    builder.type_picker.value = "regex_extract"
    assert list(builder.fields) == ["input", "field", "pattern", "keep"] and isinstance(
        builder.fields["input"], widgets.Dropdown
    )
    assert isinstance(builder.fields["keep"], widgets.Checkbox)  # the editors' `keep`, from the server
    fill(builder, "regex_extract", "number", field="path", pattern=PATTERN)
    builder.type_picker.value = "select"
    assert list(builder.fields["input"].options) == ["raw", "number"]  # inputs are picked from the nodes
    fill(builder, "select", "images", input="number", where="n IS NOT NULL")
    fill(builder, "split", "parts", input="images", ratios="{train: 0.6, val: 0.4}", seed="3")
    builder.type_picker.value = "save_dataset"
    assert list(builder.fields["input"].options) == ["raw", "number", "images", "parts.train", "parts.val"]
    fill(builder, "save_dataset", "save", input="parts.val", name="shapes-val")
    assert builder.message.value == "added save"
    assert builder.validation["ok"], builder.validation["problems"]
    assert (
        "number</td><td>regex_extract</td><td>out: path, contentType, content, n</td>"
        in builder.nodes_view.value
    )

    p = Pipeline("shapes-png")
    images = (
        p.dataset("shapes", id="raw")
        .regex_extract("path", PATTERN, id="number")
        .select("n IS NOT NULL", id="images")
    )
    images.split({"train": 0.6, "val": 0.4}, seed=3, id="parts")["val"].save("shapes-val", id="save")
    assert builder.text == p.to_yaml() and builder.yaml_view.value == p.to_yaml()

    file = builder.save(tmp_path / "shapes.kpl-pipeline.yaml")
    assert parse(file.read_text()).nodes == p.nodes
    reopened = PipelineBuilder(path=file, client=kpl_server.client())
    assert reopened.pipeline.nodes == builder.pipeline.nodes and reopened.text == builder.text
    assert reopened.validation["ok"]


def test_refuses_bad_parameters_and_shows_problems(kpl_server, kpl_data):
    builder = PipelineBuilder("bad", client=kpl_server.client())
    fill(builder, "dataset", "raw", dataset="shapes")
    fill(builder, "select", "kept", input="raw")  # no where
    assert "where: Field required" in builder.message.value and "kept" not in builder.pipeline.nodes
    fill(builder, "rename", "renamed", input="raw", fields="{content: [")
    assert "fields: not a YAML value" in builder.message.value
    fill(builder, "select", "kept", input="raw", where="nope = 1")
    assert not builder.validation["ok"]
    assert (
        "where: Referenced column &quot;nope&quot; not found" in builder.nodes_view.value
        and "1 problem(s)" in builder.nodes_view.value
    )
    builder.remove_picker.value = "kept"
    builder.remove_button.click()
    assert list(builder.pipeline.nodes) == ["raw"] and builder.validation["ok"]
    with pytest.raises(ValueError, match="'nope' is not a node type"):
        builder.add_node("nope")


def test_preview_runs_the_node_and_shows_its_first_records(kpl_server, kpl_data):
    builder = PipelineBuilder("preview", client=kpl_server.client())
    builder.add_node("dataset", "raw", dataset="shapes")
    builder.add_node("regex_extract", "number", input="raw", field="path", pattern=PATTERN)
    builder.add_node("select", "images", input="number", where="n IS NOT NULL")
    builder.add_node("select", "other", input="raw", where="true")
    assert builder.upstream("images") == ["raw", "number", "images"]
    builder.remove_picker.value = "images"
    builder.preview_button.click()
    view = builder.preview_view.value
    assert "<b>images.out</b>: first 5 of 5 records" in view
    assert "<th>n</th>" in view and "<td>images/0.png</td>" in view and "bytes&gt;</td>" in view
    shown = builder.preview("number", limit=2)
    assert shown["total"] == 6 and len(shown["records"]) == 2
    assert {f["name"]: f["nullable"] for f in shown["fields"]}["n"] is True
    expected = {r["path"]: r["path"].removeprefix("images/").removesuffix(".png") for r in shown["records"]}
    assert {r["path"]: r["n"] for r in shown["records"]} == {
        p: (n if p.startswith("images/") else None) for p, n in expected.items()
    }
    builder.add_node("select", "broken", input="raw", where="CAST(path AS INTEGER) > 0")
    builder.preview("broken")
    assert "preview run" in builder.preview_view.value and "failed" in builder.preview_view.value
