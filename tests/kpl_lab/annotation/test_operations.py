"""The annotation operations are the annotation routes: same methods and paths, run by the same functions."""

from __future__ import annotations

import inspect

from kpl_lab.annotation.operations import OPERATIONS
from kpl_lab.server_ext.routes import ANNOTATION_ROUTES


def test_every_annotation_route_has_its_operation_and_no_other():
    routes = {(method.upper(), route.path) for route in ANNOTATION_ROUTES for method in route.operations}
    assert {(op.method, op.path) for op in OPERATIONS} == routes


def test_each_handler_method_calls_the_operation_of_its_route():
    for route in ANNOTATION_ROUTES:
        for method in route.operations:
            source = inspect.getsource(getattr(route.handler, method))
            (operation,) = [op for op in OPERATIONS if (op.method, op.path) == (method.upper(), route.path)]
            assert (
                f"op.{operation.function.__name__}," in source
                or f"op.{operation.function.__name__})" in source
            )
            assert ("members=True" in source) == operation.members, (method, route.path)
            if operation.body is not None:
                assert f"self.body_as({operation.body.__name__})" in source
