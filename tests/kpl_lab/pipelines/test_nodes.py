"""Node types: each one class in the registry with its parameters, checks, execution and editor metadata."""

from __future__ import annotations

import json
import pickle

from kpl_lab.pipelines.format import parse
from kpl_lab.pipelines.nodes import (
    CATEGORIES,
    NODE_TYPES,
    NodeType,
    Params,
    PlatformNode,
    Processor,
    Relational,
)
from kpl_lab.pipelines.validate import PlatformCatalog, Validation, validate

from .test_validate import ISSUE_FILE

KINDS = {Relational: "query", Processor: "process", PlatformNode: "run"}  # how each kind runs


def test_every_node_type_carries_its_parameters_checks_execution_and_editor_metadata():
    for name, node_type in NODE_TYPES.items():
        fields = node_type.params.model_fields
        # parameters: its own schema; the inputs it names are parameters of it
        assert node_type.name == name and issubclass(node_type.params, Params), name
        assert set(node_type.ports) <= set(fields) and node_type.named_inputs == ("inputs" in fields), name
        # checks: its own
        assert type(node_type).check is not NodeType.check, name
        # execution: one kind, its method its own; a Ray form is a method of it where there is one
        kinds = [kind for kind in KINDS if isinstance(node_type, kind)]
        assert len(kinds) == 1, name
        method = KINDS[kinds[0]]
        assert getattr(type(node_type), method) is not getattr(kinds[0], method), name
        assert node_type.on_ray is None or node_type.on_ray.__self__ is node_type, name
        assert node_type.fused == (kinds[0] is Relational) and (node_type.fused or not node_type.keepable)
        # what the editors show: a palette group, a description, a form from the parameters (and keep)
        assert node_type.category in CATEGORIES and node_type.description, name
        form = node_type.parameter_schema()["properties"]
        assert set(form) == set(fields) | ({"keep"} if node_type.keepable else set()), name


def test_a_node_type_crosses_a_process_as_the_registrys_own():
    for node_type in NODE_TYPES.values():
        assert pickle.loads(pickle.dumps(node_type)) is node_type


def test_the_checked_pipeline_a_run_keeps_reads_back_as_checked(lab, fruit):
    fruit.add("fruit-detection", fruit.files("detection", 4))
    text = ISSUE_FILE + (
        "  parts: {type: split, input: joined, ratios: {train: 0.75, test: 0.25}, seed: 3}\n"
        "  ids: {type: label_id, input: parts.train, field: id, output: n, keep: true}\n"
    )
    checked = validate(parse(text), PlatformCatalog(lab, "p"))
    assert checked.ok, checked.problems
    kept = Validation.from_record(json.loads(json.dumps(checked.to_record())))  # as the run's record holds it
    assert kept.to_dict() == checked.to_dict() and kept.order == checked.order
    for node_id, node in checked.nodes.items():
        back = kept.nodes[node_id]
        assert back.node_type is node.node_type and back.keep == node.keep and back.edges == node.edges
        assert back.params.model_dump(mode="json") == node.params.model_dump(mode="json")  # its cache key
        for mine, theirs in ((node.inputs, back.inputs), (node.outputs, back.outputs)):
            assert list(mine) == list(theirs)
            for port, out in mine.items():
                assert (theirs[port].kind, theirs[port].catalog, theirs[port].ref) == (
                    out.kind,
                    out.catalog,
                    out.ref,
                )
                assert out.schema is None or theirs[port].schema.equals(out.schema, check_metadata=True)
    raw = kept.nodes["raw"].outputs["out"]
    assert (raw.ref, raw.part) == (lab.catalog.get_dataset("p", "fruit-detection").ref, "root")
