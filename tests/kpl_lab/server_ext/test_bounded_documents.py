"""Over HTTP, an unbounded document is a 400 naming the field: YAML aliases, deep nesting, huge search spaces."""

from __future__ import annotations

import json

import pytest

from ..test_documents import LAUGHS
from .conftest import zip_bytes
from .test_jobs_api import TRAIN, add_algorithm, environment


async def post_raw(api, path: str, body: bytes) -> tuple[int, dict]:
    response = await api.raw("POST", path, body)
    return response.code, json.loads(response.body)


async def test_json_bodies_nesting_past_64_levels_are_bad_requests(api):
    deep = {"name": "x", "algorithm": "a", "parameters": {"p": json.loads("[" * 70 + "]" * 70)}}
    for path in ("experiments", "jobs", "pipelines/validate"):
        for body in (b"[" * 100_000, json.dumps(deep).encode()):  # a RecursionError to json, then a deep one
            code, refused = await post_raw(api, path, body)
            assert (code, refused["field"]) == (400, "body"), (path, refused)
            assert refused["message"] == "the request body: JSON lists and objects nest deeper than 64 levels"


async def test_unbounded_yaml_is_a_bad_request_naming_where(api):
    pipeline = "version: 1\nname: laughs\nnodes:\n  raw: {type: dataset, dataset: fruit}\n" + LAUGHS
    code, refused = await api.post("pipelines/runs", {"text": pipeline})
    assert (code, refused["field"]) == (400, "text"), refused
    assert "line 5: anchor &a: anchors and aliases are not accepted" in refused["message"]
    code, refused = await api.post("pipelines/runs", {"text": "[" * 2048})
    assert (code, refused["field"]) == (400, "text"), refused
    assert "line 1: lists and mappings nest deeper than 64 levels" in refused["message"]
    archive = zip_bytes(
        {
            "laughs/environment.yml": environment("python main.py").encode(),
            "laughs/parameter.yml": LAUGHS.encode(),
            "laughs/main.py": b"print(1)\n",
        }
    )
    code, refused = await api.upload("algorithms", archive, filename="laughs.zip")
    assert (code, refused["field"]) == (400, "body"), refused
    assert refused["message"].endswith(
        "anchors and aliases are not accepted; write the value out (parameter.yml:1:4)"
    )


SEARCH = {"name": "s", "algorithm": "trainer", "objective": {"metric": "loss/val"}}


@pytest.mark.parametrize(
    ("space", "field", "message"),
    [
        pytest.param(
            '{"type": "float", "low": 0, "high": 1, "step": 1e-308}',
            "space.lr.float.step",
            "cuts [0.0, 1.0] into more than 10,000 steps: take a step of at least 0.0001",
            id="tiny-step",
        ),
        pytest.param(
            '{"type": "float", "low": -Infinity, "high": 1}',
            "space.lr.float.low",
            "finite number",
            id="infinite",
        ),
        pytest.param(
            '{"type": "float", "low": 0, "high": NaN}', "space.lr.float.high", "finite number", id="nan"
        ),
        pytest.param(
            '{"type": "float", "low": 0, "high": 1e300}',
            "space.lr.float.high",
            "less than or equal to",
            id="huge",
        ),
        pytest.param(
            '{"type": "int", "low": 0, "high": 10000000000000000}',
            "space.lr.int.high",
            "less than or equal to 1000000000000000",
            id="huge-int",
        ),
        pytest.param(
            '{"type": "float", "low": 2, "high": 1}',
            "space.lr.float.high",
            "must not be below low (2.0)",
            id="upside",
        ),
        pytest.param(
            '{"type": "float", "low": 0, "high": 1, "log": true}',
            "space.lr.float.log",
            "a log scale needs low > 0, got 0.0",
            id="log-of-0",
        ),
        pytest.param(
            '{"type": "int", "low": 1, "high": 9, "log": true, "step": 2}',
            "space.lr.int.step",
            "a log scale takes no step",
            id="log-step",
        ),
        pytest.param(
            '{"type": "categorical", "choices": [1, NaN]}',
            "space.lr.categorical.choices",
            "choice 1 is not a finite number within ±10^15",
            id="nan-choice",
        ),
        pytest.param(
            json.dumps({"type": "categorical", "choices": list(range(10_001))}),
            "space.lr.categorical.choices",
            "List should have at most 10000 items",
            id="many-choices",
        ),
    ],
)
async def test_each_unbounded_range_is_a_bad_request_naming_its_field(api, space, field, message):
    body = json.dumps(SEARCH)[:-1] + f', "space": {{"lr": {space}}}}}'
    code, refused = await post_raw(api, "experiments", body.encode())
    assert (code, refused["field"]) == (400, field), refused
    assert message in refused["errors"][0]["message"], refused


async def test_a_grid_past_10000_points_is_refused_without_being_listed(api, monkeypatch):
    from kpl_lab.experiments import search

    def listed(spec):
        raise AssertionError(f"the grid of {spec} was listed")

    monkeypatch.setattr(search, "grid_values", listed)
    await add_algorithm(api, "trainer", TRAIN)
    grid = {**SEARCH, "sampler": {"name": "grid"}}
    three_million = {
        "epochs": {"type": "int", "low": 1, "high": 2000},
        "lr": {"type": "float", "low": 0, "high": 1, "step": 1 / 1499},
    }
    code, refused = await api.post("experiments", {**grid, "space": three_million})
    assert (code, refused["field"]) == (400, "space"), refused
    assert refused["message"] == (
        "space: the grid has 2,000 (epochs) × 1,500 (lr) = 3,000,000 points; "
        "the grid sampler takes at most 10,000"
    )
    code, refused = await api.post(
        "experiments", {**grid, "space": {"epochs": {"type": "int", "low": 0, "high": 10**13}}}
    )
    assert (code, refused["field"]) == (400, "space.epochs"), refused
    assert "gives the grid 10,000,000,000,001 values" in refused["message"]
    code, refused = await api.post(
        "experiments", {**SEARCH, "space": three_million, "sampler": {"name": "tpe", "seed": 2**32}}
    )
    assert (code, refused["field"]) == (400, "sampler.seed"), refused
    assert (await api.get("jobs"))[1]["jobs"] == []
