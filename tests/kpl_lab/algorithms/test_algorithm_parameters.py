"""parameter.yml: JSON Schema for forms, overrides with type checks and clear errors."""

from __future__ import annotations

import json

import pytest

from kpl_lab.algorithms.errors import ParameterError
from kpl_lab.algorithms.parameters import apply_overrides, parameter_schema, parse_parameters

PARAMETER_YML = """\
# learning rate of SGD
lr: 0.01
epochs: 3  # passes over the data
batch_size: 64
aug: false
name: resnet
tag: null
sizes: [32, 64]
mixed: [1, a]
model:
  depth: 18
  head:
    dropout: 0.5
created: 2020-04-16
"""


@pytest.fixture
def parameters():
    return parse_parameters(PARAMETER_YML)


def messages(excinfo) -> list[str]:
    return [str(problem) for problem in excinfo.value.problems]


def test_schema_types_nesting_arrays_and_descriptions(parameters):
    schema = parameters.schema()
    json.dumps(schema)  # a UI receives it as JSON
    props = schema["properties"]
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert props["lr"] == {
        "type": "number",
        "default": 0.01,
        "title": "lr",
        "description": "learning rate of SGD",
    }
    assert props["epochs"]["type"] == "integer" and props["epochs"]["description"] == "passes over the data"
    assert props["aug"]["type"] == "boolean" and props["name"]["type"] == "string"
    assert "type" not in props["tag"] and props["tag"]["default"] is None
    assert props["sizes"] == {
        "type": "array",
        "items": {"type": "integer"},
        "default": [32, 64],
        "title": "sizes",
    }
    assert "items" not in props["mixed"]
    head = props["model"]["properties"]["head"]
    assert head["type"] == "object" and head["properties"]["dropout"]["type"] == "number"
    assert props["created"] == {"type": "string", "default": "2020-04-16", "title": "created"}


def test_schema_of_plain_dict():
    schema = parameter_schema({"a": [{"x": 1}], "b": [1, 2.5]})
    assert schema["properties"]["a"]["items"]["properties"]["x"]["type"] == "integer"
    assert schema["properties"]["b"]["items"] == {"type": "number"}


def test_string_overrides_are_coerced(parameters):
    values = parameters.apply(
        ["lr=1", "epochs=10", "aug=true", "name=001", "model.depth=34", "sizes=[1, 2, 3]", "tag={a: 1}"]
    )
    assert values["lr"] == 1.0 and isinstance(values["lr"], float)
    assert values["epochs"] == 10 and values["aug"] is True
    assert values["name"] == "001"  # text stays text, never read as a number
    assert values["model"] == {"depth": 34, "head": {"dropout": 0.5}}
    assert values["sizes"] == [1, 2, 3] and values["tag"] == {"a": 1}
    assert parameters.values["model"]["depth"] == 18  # the defaults are untouched


def test_typed_overrides_nested_and_dotted(parameters):
    values = apply_overrides(
        parameters.values, {"model": {"head": {"dropout": 0}}, "batch_size": 8, "model.depth": 50}
    )
    assert values["model"] == {"depth": 50, "head": {"dropout": 0.0}} and values["batch_size"] == 8


def test_every_bad_override_is_named(parameters):
    with pytest.raises(ParameterError) as info:
        parameters.apply(
            [
                "lr=abc",
                "epochs=1.5",
                "aug=maybe",
                "lrr=1",
                "model.dpth=3",
                "sizes=[a]",
                "noequals",
                "model.depth.x=1",
            ]
        )
    assert messages(info) == [
        "noequals: expected NAME=VALUE (e.g. lr=0.01, model.depth=18)",
        'lr: expected a number, got "abc"',
        'epochs: expected an integer, got "1.5"',
        'aug: expected true or false, got "maybe"',
        'lrr: unknown parameter; did you mean "lr"?',
        'model.dpth: unknown parameter; did you mean "model.depth"?',
        'sizes: expected a list of integers (YAML, e.g. [32, 64]), got "[a]"',
        "model.depth.x: unknown parameter (model.depth is integer, not a mapping)",
    ]


def test_typed_value_errors(parameters):
    with pytest.raises(ParameterError) as info:
        parameters.apply({"name": 3, "batch_size": True, "model": 5, "unknown": 1})
    assert messages(info) == [
        "name: expected text, got 3",
        "batch_size: expected an integer, got true",
        "model: expected a mapping (YAML, e.g. {a: 1}), got 5",
        "unknown: unknown parameter",
    ]


def test_invalid_yaml_override(parameters):
    with pytest.raises(ParameterError, match=r'sizes: expected a list of integers .*, got "\[1, 2"'):
        parameters.apply(["sizes=[1, 2"])


def test_unbounded_yaml_overrides_are_bad_values(parameters):
    with pytest.raises(ParameterError) as info:
        parameters.apply(["lr=2024-13-01", "batch_size=*x", "sizes=" + "[" * 2048])
    assert messages(info) == [
        'lr: expected a number, got "2024-13-01"',
        'batch_size: expected an integer, got "*x"',
        f"sizes: expected a list of integers (YAML, e.g. [32, 64]), got {json.dumps('[' * 2048)}",
    ]


def test_parse_errors_have_lines():
    with pytest.raises(ParameterError) as info:
        parse_parameters("a: 1\na: 2\n3: x\n", file="parameter.yml")
    assert messages(info) == [
        "a: duplicate parameter (parameter.yml:2)",
        "3: parameter names must be text (parameter.yml:3)",
    ]
    with pytest.raises(ParameterError, match=r"expected a mapping of parameter names to values, got \[1\]"):
        parse_parameters("- 1\n")
    with pytest.raises(ParameterError, match=r"invalid YAML: .*\(parameter.yml:2:1\)"):
        parse_parameters("a: [\n")


def test_unbounded_yaml_is_refused_with_its_place():
    laughs = "a: &a [lol, lol, lol]\nb: &b [*a, *a, *a]\nc: [*b, *b, *b]\n"
    with pytest.raises(ParameterError) as info:
        parse_parameters(laughs, file="parameter.yml")
    assert messages(info) == [
        "anchor &a: anchors and aliases are not accepted; write the value out (parameter.yml:1:4)"
    ]
    with pytest.raises(ParameterError) as info:
        parse_parameters("a: 1\nlists: " + "[" * 2048)
    assert messages(info) == ["lists and mappings nest deeper than 64 levels (parameter.yml:2:71)"]
    with pytest.raises(ParameterError) as info:
        parse_parameters("a: 1\nwhen: 2024-13-01\n")
    assert messages(info) == [
        "cannot read the value '2024-13-01': month must be in 1..12 (parameter.yml:2:7)"
    ]


def test_empty_file_means_no_parameters():
    assert parse_parameters("").values == {} and parse_parameters("# nothing\n").schema()["properties"] == {}
