"""Write docs/openapi.yaml from the routes table and the pydantic models of `kpl_lab.api`.

Run `python -m kpl_lab.server_ext.openapi > docs/openapi.yaml` after changing a route or a
model; a test fails while the committed file differs from what this writes.
"""

from __future__ import annotations

import re
import sys
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from ..api.catalog import NAME_SCHEMA
from ..api.datasets import BytesRef
from ..api.errors import Error
from ..api.experiments import PlotKind
from .routes import ROUTES, Route
from .spec import Operation

REF = "#/components/schemas/{model}"
ERROR_STATUSES = {
    "400": "Bad request: `field` and `errors` name every field at fault",
    "403": "Forbidden: the project or the object is not yours to use",
    "404": "Not found in this project",
    "409": "Conflict with the object's state",
}
MORE_STATUSES = {
    "502": "Bad gateway: the deployed model failed on this request (its error in `message`)",
    "503": "Unavailable: the import queue is full, or a deployment has no ready replica; try again later",
}
PATH_PARAMETERS = {
    "name": {"schema": NAME_SCHEMA},
    "version": {"schema": NAME_SCHEMA, "description": "a version, or a unique prefix of one"},
    "job_id": {"schema": {"type": "string"}},
    "run_id": {"schema": {"type": "string"}, "description": "a pipeline run id"},
    "node": {"schema": {"type": "string"}, "description": "a node id of the pipeline"},
    "key_id": {"schema": {"type": "string"}, "description": "a deployment key's id (`key list`)"},
    "alias": {"schema": NAME_SCHEMA, "description": "a model alias: production, canary or any name"},
    "index": {"schema": {"type": "integer", "minimum": 0}},
    "record": {"schema": {"type": "integer", "minimum": 0}, "description": "a record number of the task"},
    "field": {
        "schema": {"type": "string"},
        "description": "field path: a top-level field, or e.g. object.0.mask",
    },
    "kind": {"schema": {"type": "string", "enum": [kind.value for kind in PlotKind]}, "description": "plot"},
}
DESCRIPTION = """\
The REST API of the KPL Lab jupyter-server extension, written by
`python -m kpl_lab.server_ext.openapi` from the routes table (kpl_lab/server_ext/routes.py)
and the response models (kpl_lab/api/); do not edit it by hand.

Every path is under `/kpl/api/` of the Jupyter server, answers JSON unless said otherwise,
and needs the usual Jupyter authentication: `Authorization: token <server token>`, or the
login cookie plus the `X-XSRFToken` header for requests that change something.

Every object belongs to a project. Without `?project=` the project is `default`; a project
the user may not use answers 403, and another project's object answers 404.

Errors answer the `Error` schema with status 400 (bad request), 403 (forbidden), 404 (not
found), 409 (conflict with the object's state), 503 (where said) or 500: `field` is the
dotted path of the first field at fault (`parameters.steps`, `resources.cpu`) and `errors`
lists every one. A request without valid credentials answers 403, as Jupyter Server does
(not 401). A path under /kpl/api/ that no route takes answers 404, and a method a path
does not take answers 405 with an `Allow` header, both in the `Error` shape.

Names of projects, datasets, models, algorithms and versions are 1-100 ASCII letters,
digits, `_`, `-` or `.`, starting with a letter, digit or `_` (the `pattern` of each).
"""
UPLOAD_TYPES = ("application/zip", "application/x-tar", "application/octet-stream")


def _models() -> list[tuple[type[BaseModel], str]]:
    """Return every model the routes name, with the mode it is read in (bodies) or written in (answers)."""
    found: dict[type[BaseModel], str] = {Error: "serialization", BytesRef: "serialization"}
    for route in ROUTES:
        for operation in route.operations.values():
            if operation.answer is not None:
                found[operation.answer] = "serialization"
            if isinstance(operation.body, type):
                found[operation.body] = "validation"
    return list(found.items())


def _tidy(schema: Any) -> Any:
    """Drop pydantic's generated property titles (the property name says it)."""
    if isinstance(schema, dict):
        tidy = {key: _tidy(value) for key, value in schema.items()}
        for prop in (tidy.get("properties") or {}).values():
            prop.pop("title", None)
        return tidy
    if isinstance(schema, list):
        return [_tidy(item) for item in schema]
    return schema


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": REF.format(model=model.__name__)}


def _parameters(route: Route, operation: Operation) -> list[dict[str, Any]]:
    parameters = [
        {"name": name, "in": "path", "required": True, **PATH_PARAMETERS[name]}
        for name in re.findall(r"\{(\w+)\}", route.path)
    ]
    if operation.project:
        parameters.append({"$ref": "#/components/parameters/project"})
    for query in operation.query:
        schema = (
            {"$ref": REF.format(model=query.schema.__name__)}
            if isinstance(query.schema, type)
            else query.schema
        )
        parameter = {"name": query.name, "in": "query", "required": query.required, "schema": schema}
        if query.description:
            parameter["description"] = query.description
        parameters.append(parameter)
    return parameters


def _operation(route: Route, method: str, operation: Operation) -> dict[str, Any]:
    handler = route.handler
    item: dict[str, Any] = {
        "operationId": f"{method}{handler.__name__.removesuffix('Handler')}",
        "summary": operation.summary,
    }
    if operation.description:
        item["description"] = operation.description
    item["parameters"] = _parameters(route, operation)
    if operation.job_token:
        item["security"] = [{"jobToken": []}]
    if operation.deployment_key:
        item["security"] = [{"token": []}, {"deploymentKey": []}, {"deploymentKeyHeader": []}]
    if operation.upload:
        binary = {"schema": {"type": "string", "format": "binary"}}
        item["requestBody"] = {"required": True, "content": {kind: binary for kind in UPLOAD_TYPES}}
    elif operation.body is not None:
        body = _ref(operation.body) if isinstance(operation.body, type) else operation.body
        item["requestBody"] = {"required": operation.body_required, "content": _json(body)}
    content = _json(_ref(operation.answer)) if operation.answer is not None else {}
    success = "Created" if operation.status == 201 else "OK"
    responses: dict[str, Any] = {
        str(operation.status): {"description": success, "content": content | operation.content}
    }
    for status in (*ERROR_STATUSES, *operation.errors):
        responses[status] = {"$ref": f"#/components/responses/Error{status}"}
    responses["default"] = {"$ref": "#/components/responses/Error"}
    item["responses"] = responses
    return item


def document() -> dict[str, Any]:
    """Return the OpenAPI document of the REST API."""
    _, schemas = models_json_schema(_models(), ref_template=REF)
    responses = {
        f"Error{status}": {"description": text, "content": _json({"$ref": REF.format(model="Error")})}
        for status, text in (ERROR_STATUSES | MORE_STATUSES).items()
    }
    responses["Error"] = {
        "description": "Internal error (500), without a traceback",
        "content": _json({"$ref": REF.format(model="Error")}),
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "KPL Lab REST API", "version": "1", "description": DESCRIPTION},
        "servers": [{"url": "/kpl/api"}],
        "security": [{"token": []}],
        "components": {
            "securitySchemes": {
                "token": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "Authorization",
                    "description": "`token <Jupyter server token>`",
                },
                "jobToken": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "Authorization",
                    "description": "`token <KPL_JOB_TOKEN of the job>` (only for posting a job's events)",
                },
                "deploymentKey": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "an API key of the deployment (`kpl-lab deployment key create`): its "
                    "predict only",
                },
                "deploymentKeyHeader": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "X-KPL-API-Key",
                    "description": "an API key of the deployment, the same as `deploymentKey`",
                },
            },
            "parameters": {
                "project": {
                    "name": "project",
                    "in": "query",
                    "required": False,
                    "description": "project of the objects (default `default`)",
                    "schema": {**NAME_SCHEMA, "default": "default"},
                }
            },
            "responses": responses,
            "schemas": dict(sorted(_tidy(schemas["$defs"]).items())),
        },
        "paths": {
            route.path: {method: _operation(route, method, op) for method, op in route.operations.items()}
            for route in ROUTES
        },
    }


def render() -> str:
    """Return docs/openapi.yaml as text."""
    return yaml.safe_dump(document(), sort_keys=False, allow_unicode=True, width=100)


if __name__ == "__main__":
    sys.stdout.write(render())
