"""Every route the app registers is in docs/openapi.yaml, with the same methods, and vice versa."""

from pathlib import Path

import pytest
import yaml

from kpl_lab.server_ext.routes import ROUTES, tornado_pattern

OPENAPI = Path(__file__).parents[3] / "docs" / "openapi.yaml"
METHODS = ("get", "post", "put", "patch", "delete")


def documented() -> dict[str, set[str]]:
    spec = yaml.safe_load(OPENAPI.read_text())
    return {path: {m for m in METHODS if m in item} for path, item in spec["paths"].items()}


def implemented() -> dict[str, set[str]]:
    routes = {}
    for path, handler in ROUTES:
        # a method the handler defines itself or inherits from our code, not tornado's defaults
        routes[path] = {
            m
            for m in METHODS
            if any(m in vars(cls) for cls in handler.__mro__ if cls.__module__.startswith("kpl_lab"))
        }
    return routes


def test_openapi_document_is_valid():
    validator = pytest.importorskip("openapi_spec_validator")
    validator.validate(yaml.safe_load(OPENAPI.read_text()))


def test_every_route_is_documented_with_its_methods_and_vice_versa():
    assert implemented() == documented()


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
    assert registered == {base + tornado_pattern(path) for path, _ in ROUTES}
