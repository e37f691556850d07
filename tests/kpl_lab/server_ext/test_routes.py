"""The routes table, the handlers and docs/openapi.yaml agree: same paths, same methods, up to date."""

import json
from pathlib import Path

import pytest
import yaml

from kpl_lab.server_ext.openapi import render
from kpl_lab.server_ext.routes import API_PREFIX, ROUTES, tornado_pattern

OPENAPI = Path(__file__).parents[3] / "docs" / "openapi.yaml"
METHODS = ("get", "post", "put", "patch", "delete")


def documented() -> dict[str, set[str]]:
    spec = yaml.safe_load(OPENAPI.read_text())
    return {path: {m for m in METHODS if m in item} for path, item in spec["paths"].items()}


def implemented() -> dict[str, set[str]]:
    routes = {}
    for route in ROUTES:
        # a method the handler defines itself or inherits from our code, not tornado's defaults
        routes[route.path] = {
            m
            for m in METHODS
            if any(m in vars(cls) for cls in route.handler.__mro__ if cls.__module__.startswith("kpl_lab"))
        }
    return routes


def test_openapi_document_is_valid():
    validator = pytest.importorskip("openapi_spec_validator")
    validator.validate(yaml.safe_load(OPENAPI.read_text()))


def test_committed_openapi_is_the_generated_one():
    assert OPENAPI.read_text() == render(), (
        "docs/openapi.yaml is stale: run `python -m kpl_lab.server_ext.openapi > docs/openapi.yaml`"
    )


def test_every_route_declares_the_methods_its_handler_has():
    assert {route.path: set(route.operations) for route in ROUTES} == implemented()
    assert implemented() == documented()


def test_every_operation_answers_the_error_shape():
    spec = yaml.safe_load(OPENAPI.read_text())
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            statuses = set(operation["responses"])
            assert {"400", "403", "404", "409", "default"} <= statuses, (method, path)


def _patterns(router) -> set[str]:
    """Return the URL patterns of every rule of a tornado router, nested routers included."""
    found = set()
    for rule in getattr(router, "rules", []):
        regex = getattr(rule.matcher, "regex", None)
        if regex is not None:
            found.add(regex.pattern)
        found |= _patterns(rule.target)
    return found


def test_registered_handlers_are_the_routes(jp_serverapp):
    registered = {
        p.removesuffix("$") for p in _patterns(jp_serverapp.web_app.default_router) if "/kpl/api/" in p
    }
    base = jp_serverapp.base_url.rstrip("/")
    # and, last, the JSON 404 of every other path under /kpl/api/
    expected = {base + tornado_pattern(route.path) for route in ROUTES} | {f"{base}{API_PREFIX}/.*"}
    assert registered == expected


async def test_unknown_paths_and_methods_answer_the_error_shape(api):
    response = await api.raw("GET", "datasets/d/versions/v/records/-1/fields/f")
    assert response.code == 404 and json.loads(response.body)["error"] == "HTTPError"
    response = await api.raw("PUT", "datasets")
    assert response.code == 405 and response.headers["Allow"] == "GET, POST, OPTIONS"
    assert (await api.get("datasets", project=""))[0] == 400


async def test_names_are_checked_as_the_document_states_them(api):
    # the document's pattern is ASCII, as every JSON Schema validator reads `^[A-Za-z0-9_]...`
    for path in ("datasets", "jobs", "quota", "deployments", "devices", "pipelines/templates"):
        code, refused = await api.get(path, project="û")
        assert (code, refused["field"]) == (400, "project"), (path, refused)
        assert "ASCII letters" in refused["message"]
    assert (await api.get("datasets", project="other"))[0] == 200


async def test_query_arguments_are_checked_as_documented(api):
    code, refused = await api.get("jobs", state="")
    assert (code, refused["field"]) == (400, "state"), refused
    code, refused = await api.get("pipelines/runs", limit="")
    assert (code, refused["field"]) == (400, "limit"), refused
    code, refused = await api.upload("algorithms", b"PK", name="")
    assert (code, refused["field"]) == (400, "name"), refused
    assert (await api.get("jobs", state="queued"))[0] == 200


async def test_bodies_are_read_as_json_schema_reads_them(api):
    # a required body is required: an empty PUT does not clear the quota
    response = await api.raw("PUT", "quota", b"")
    assert response.code == 400 and json.loads(response.body)["field"] == "body"
    response = await api.raw("PUT", "quota", b"null")
    refused = json.loads(response.body)
    assert (response.code, refused["field"]) == (400, "body") and refused["message"].endswith("got null")
    # no coercion JSON Schema does not make: false is no number, "2" no number
    for body, field in (({"notebooks": False}, "notebooks"), ({"cpu": "2"}, "cpu")):
        code, refused = await api.call("PUT", "quota", body)
        assert (code, refused["field"]) == (400, field), refused
    code, quota = await api.call("PUT", "quota", {"cpu": 2, "memory": 512.0})
    assert code == 200 and quota["quota"]["cpu"] == 2 and quota["quota"]["memory"] == 512, quota
    # but 2.0 is an integer, as JSON Schema says (the algorithm is looked up once the body is read)
    code, refused = await api.post("jobs", {"algorithm": "nothing", "priority": 2.0})
    assert code == 404, refused
    code, refused = await api.post("jobs", {"algorithm": "nothing", "priority": True})
    assert (code, refused["field"]) == (400, "priority"), refused
    code, refused = await api.call("PUT", "models/m/aliases/production", {"version": 1})
    assert (code, refused["field"]) == (400, "version"), refused


async def test_an_unknown_path_answers_404_naming_it(api):
    for method in ("GET", "DELETE"):
        response = await api.raw(method, "nowhere")
        assert response.code == 404, method
        message = json.loads(response.body)["message"]
        assert message.startswith("no such path in the KPL API: /") and message.endswith("/kpl/api/nowhere")
