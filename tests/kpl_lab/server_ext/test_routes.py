"""The routes table, the handlers and docs/openapi.yaml agree: same paths, same methods, up to date."""

import json
from pathlib import Path

import pytest
import yaml

from kpl_lab.server_ext.openapi import render
from kpl_lab.server_ext.routes import API_PREFIX, ROUTES, handler_of, tornado_pattern

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
            if any(
                m in vars(cls) for cls in handler_of(route).__mro__ if cls.__module__.startswith("kpl_lab")
            )
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
