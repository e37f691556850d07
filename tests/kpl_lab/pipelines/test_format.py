"""Pipeline files are read within bounds: aliases, deep nesting and bad values are problems with a line."""

from __future__ import annotations

import textwrap
import tracemalloc

import pytest

from kpl_lab.errors import BadRequest
from kpl_lab.pipelines import parse
from kpl_lab.pipelines.format import PipelineSyntaxError, Spec, load_yaml
from kpl_lab.pipelines.runner import PipelineRunner

from ..test_documents import LAUGHS

# the outside check's file: a billion strings once the aliases are expanded, in a node's parameters
PIPELINE = (
    "version: 1\nname: laughs\nnodes:\n  raw:\n    type: dataset\n    dataset: fruit\n  pick:\n"
    "    type: select\n    input: raw\n    where: 'true'\n    fields:\n" + textwrap.indent(LAUGHS, "      ")
)


def problems(text: str) -> list[str]:
    with pytest.raises(PipelineSyntaxError) as error:
        parse(text)
    return [str(problem) for problem in error.value.problems]


def test_billion_laughs_is_a_problem_at_its_anchor_with_little_memory():
    tracemalloc.start()
    try:
        found = problems(PIPELINE)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"{peak:,} bytes"
    assert found == ["line 12: anchor &a: anchors and aliases are not accepted; write the value out"]


def test_deep_nesting_and_unreadable_values_are_problems_with_their_line():
    assert problems("version: 1\nname: x\nnodes: " + "[" * 2048) == [
        "line 3: lists and mappings nest deeper than 64 levels"
    ]
    assert problems("version: 1\nname: x\nnodes:\n  d: {type: dataset, dataset: 2024-02-30}\n") == [
        "line 4: cannot read the value '2024-02-30': day is out of range for month"
    ]
    assert problems("version: 1\nnodes: [\n") == [
        "line 3: not valid YAML: expected the node content, but found '<stream end>'"
    ]


def test_values_typed_in_the_builder_are_read_the_same_way():
    assert load_yaml("{content: mask}") == {"content": "mask"}
    with pytest.raises(ValueError, match="alias \\*x"):
        load_yaml("*x")


def test_a_run_of_billion_laughs_is_refused_as_a_bad_request(lab):
    with pytest.raises(BadRequest) as refused:
        PipelineRunner(lab).create("p", PIPELINE)
    assert refused.value.status == 400 and refused.value.field == "text"
    assert "line 12: anchor &a" in refused.value.message


def test_a_value_two_nodes_share_is_written_out_twice_not_aliased():
    fields = ["path", "content"]
    shared = {
        "a": {"type": "dataset", "dataset": "fruit", "fields": fields},
        "b": {"type": "dataset", "dataset": "fruit", "fields": fields},
    }
    text = Spec("shared", shared).to_yaml()
    assert "&" not in text and "*" not in text
    assert parse(text).nodes == shared
