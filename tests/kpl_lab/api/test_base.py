"""Strings that match a pattern: the error and schema of Field(pattern=), no pattern for pydantic-core to compile."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
from pydantic import BaseModel, ValidationError

import kpl_lab.api
from kpl_lab.api.catalog import NAME_PATTERN
from kpl_lab.api.jobs import INPUT_PATTERN, JobRequest


def test_a_pattern_field_checks_the_whole_string_as_json_schema_reads_it():
    request = JobRequest(algorithm="classify_2:v1", inputs={"data": "dataset:cat-dog.2"})
    assert request.algorithm == "classify_2:v1"
    # ASCII, as ECMA-262 (the JSON Schema reading of the document) reads `\w`, not as Python's Unicode `\w`
    for bad in ("a\n", "../a", "a:b:c", "", "a" * 101, "分类:v1", "é"):
        with pytest.raises(ValidationError) as caught:
            JobRequest(algorithm=bad)
        (error,) = caught.value.errors()
        assert error["type"] == "string_pattern_mismatch" and error["loc"] == ("algorithm",), error
    with pytest.raises(ValidationError) as caught:
        JobRequest(algorithm="a", inputs={"data": "dataset:a:b:c"})
    (error,) = caught.value.errors()
    assert (
        error["loc"] == ("inputs", "data")
        and error["msg"] == f"String should match pattern '{INPUT_PATTERN}'"
    )


def test_the_schema_shows_the_pattern():
    schema = JobRequest.model_json_schema()
    assert schema["properties"]["algorithm"]["pattern"].startswith("^[A-Za-z0-9_]")
    assert schema["properties"]["inputs"]["additionalProperties"] == {
        "type": "string",
        "pattern": INPUT_PATTERN,
    }
    deployment = importlib.import_module("kpl_lab.api.deployments").DeploymentRequest.model_json_schema()
    assert deployment["properties"]["name"] == {"type": "string", "pattern": NAME_PATTERN, "title": "Name"}


def test_no_model_of_the_api_gives_pydantic_core_a_pattern_to_compile():
    """A Field(pattern=) costs every import of the API its compile (use `matching`)."""
    models = []
    for module in pkgutil.iter_modules(kpl_lab.api.__path__):
        found = importlib.import_module(f"kpl_lab.api.{module.name}")
        models += [m for _, m in inspect.getmembers(found, inspect.isclass) if issubclass(m, BaseModel)]
    assert len(models) > 50
    assert [m.__name__ for m in models if _compiles_a_pattern(m.__pydantic_core_schema__)] == []


def _compiles_a_pattern(schema) -> bool:
    """Say whether a core schema has a str schema with a pattern (what pydantic-core compiles)."""
    if isinstance(schema, dict):
        if schema.get("type") == "str" and "pattern" in schema:
            return True
        return any(_compiles_a_pattern(value) for value in schema.values())
    if isinstance(schema, list):
        return any(_compiles_a_pattern(value) for value in schema)
    return False
