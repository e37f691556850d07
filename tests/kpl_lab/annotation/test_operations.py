"""Every annotation route runs its operation of `kpl_lab.operations.annotation`, on both transports."""

from __future__ import annotations

import inspect

from kpl_lab.annotation import operations as op
from kpl_lab.operations.routes import ANNOTATION_ROUTES


def test_every_annotation_route_runs_one_call_of_the_annotation_operations():
    for route in ANNOTATION_ROUTES:
        for method, operation in route.operations.items():
            assert operation.run is not None, (method, route.path)
            assert operation.run.__module__ == "kpl_lab.operations.annotation", (method, route.path)
            source = inspect.getsource(operation.run)
            called = [name for name, value in vars(op).items() if callable(value) and f"op.{name}" in source]
            assert len(called) == 1, (method, route.path, called)


def test_the_operations_that_check_people_ask_the_host_for_the_members():
    asking = {
        (method, route.path)
        for route in ANNOTATION_ROUTES
        for method, operation in route.operations.items()
        if "_with_members" in inspect.getsource(operation.run)
    }
    assert asking == {
        ("get", "/annotation/tasks"),
        ("post", "/annotation/tasks"),
        ("patch", "/annotation/tasks/{name}"),
    }
