"""The annotation routes as functions of a caller, the path's names, the query and the body: no tornado.

The REST handlers call them in one line each; so does `kpl-lab annotation` on a platform it opens
itself, through `OPERATIONS` (which pairs each with its method and path), so both answer alike.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from ..api.annotation import (
    AnnotationRecord,
    AnnotationTask,
    AnnotationTaskList,
    ExportFormat,
    Label,
    LabelHistory,
    LabelImport,
    LabelRequest,
    PublishRequest,
    QueueOrder,
    RecordQueue,
    RecordState,
    ReviewRequest,
    TaskRequest,
    TaskUpdateRequest,
)
from ..api.catalog import Deleted
from ..api.datasets import DatasetVersion
from ..errors import BadRequest
from . import formats, labels, publish, tasks

if TYPE_CHECKING:
    from ..platform import Platform

QUEUE_STATES = (*(state.value for state in RecordState), "all")


@dataclass(frozen=True)
class Caller:
    """Who calls, in which project of which platform, and what the answers' URLs start with."""

    platform: Platform
    project: str
    user: str
    admin: bool
    members: list[str] | None = None  # the project's people (None: no directory of users)
    api_base: str = "/kpl/api"


def number(text: str, field: str) -> int:
    """Return a whole number of the path or the query, or refuse it naming the field."""
    if not text.isascii() or not text.isdigit() or len(text) > 15:
        raise BadRequest(f"{field}: expected a whole number, got {text!r}", field=field)
    return int(text)


def query_int(query: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    """Return an integer query argument within [low, high] (default when absent)."""
    text = query.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise BadRequest(f"{name}: expected an integer, got {text!r}", field=name) from None
    if not low <= value <= high:
        raise BadRequest(f"{name}: must be between {low} and {high}, got {value}", field=name)
    return value


def list_tasks(caller: Caller) -> AnnotationTaskList:
    """List the project's tasks."""
    return tasks.listing(caller.platform, caller.project, caller.members)


def create_task(caller: Caller, body: TaskRequest) -> AnnotationTask:
    """Create a task."""
    return tasks.create(caller.platform, caller.project, body, caller.user, caller.members)


def show_task(caller: Caller, name: str) -> AnnotationTask:
    """Show a task."""
    return tasks.show(caller.platform, caller.project, name)


def update_task(caller: Caller, name: str, body: TaskUpdateRequest) -> AnnotationTask:
    """Change a task."""
    return tasks.update(
        caller.platform, caller.project, name, body, caller.user, caller.admin, caller.members
    )


def delete_task(caller: Caller, name: str) -> Deleted:
    """Delete a task."""
    return tasks.delete(caller.platform, caller.project, name, caller.user, caller.admin)


def queue(caller: Caller, name: str, query: Mapping[str, str]) -> RecordQueue:
    """Answer a page of a task's queue."""
    state = query.get("state") or "unlabelled"
    if state not in QUEUE_STATES:
        raise BadRequest(f"state: {state!r} is not one of {', '.join(QUEUE_STATES)}", field="state")
    order = query.get("order") or "record"
    if order not in QueueOrder.__members__:
        raise BadRequest(f"order: {order!r} is not one of record, uncertainty", field="order")
    return labels.queue(
        caller.platform,
        caller.project,
        name,
        caller.user,
        state=None if state == "all" else RecordState(state),
        order=QueueOrder(order),
        mine=bool(query_int(query, "mine", 0, 0, 1)),
        after=query.get("after") or None,
        limit=query_int(query, "limit", 50, 1, labels.QUEUE_MAX),
    )


def show_record(caller: Caller, name: str, record: str) -> AnnotationRecord:
    """Show a record of a task."""
    return labels.show_record(
        caller.platform, caller.project, name, number(record, "record"), caller.api_base
    )


def save_label(caller: Caller, name: str, record: str, body: LabelRequest) -> Label:
    """Save a record's label."""
    return labels.save(
        caller.platform, caller.project, name, number(record, "record"), body, caller.user, caller.admin
    )


def review_label(caller: Caller, name: str, record: str, body: ReviewRequest) -> Label:
    """Accept or reject a record's label."""
    return labels.review(
        caller.platform, caller.project, name, number(record, "record"), body, caller.user, caller.admin
    )


def label_history(caller: Caller, name: str, record: str) -> LabelHistory:
    """Answer a record's label history."""
    return labels.history(caller.platform, caller.project, name, number(record, "record"))


def publish_task(caller: Caller, name: str, body: PublishRequest) -> DatasetVersion:
    """Publish a task's accepted labels as a dataset version."""
    return publish.publish(caller.platform, caller.project, name, body, caller.user, caller.admin)


def export_format(query: Mapping[str, str]) -> ExportFormat:
    """Return the `format` query argument, or refuse it naming the field."""
    text = query.get("format") or ""
    if text not in ExportFormat.__members__:
        known = ", ".join(ExportFormat.__members__)
        raise BadRequest(f"format: {text!r} is not one of {known}", field="format")
    return ExportFormat(text)


def export_labels(caller: Caller, name: str, query: Mapping[str, str]) -> bytes:
    """Answer a zip of a task's accepted labels (`all=1`: every saved label) in a format."""
    every = bool(query_int(query, "all", 0, 0, 1))
    return formats.export(caller.platform, caller.project, name, export_format(query), every)


def import_labels(caller: Caller, name: str, query: Mapping[str, str], upload: Path) -> LabelImport:
    """Label a task's unlabelled records from an uploaded zip or tar of a format."""
    return formats.import_labels(
        caller.platform, caller.project, name, export_format(query), upload, caller.user, caller.admin
    )


@dataclass(frozen=True)
class Op:
    """One route's method: its path (OpenAPI form), its function, its body model and whether it takes the query."""

    method: str
    path: str
    function: Callable[..., BaseModel | bytes]
    body: type[BaseModel] | None = None
    query: bool = False
    members: bool = False  # needs the project's people
    upload: bool = False  # takes an uploaded file (its path), after the query

    def match(self, method: str, path: str) -> list[str] | None:
        """Return the path's names when this operation takes the request, else None."""
        if method != self.method:
            return None
        pattern = re.sub(r"\{\w+\}", "([^/]+)", self.path)
        found = re.fullmatch(pattern, "/" + path.strip("/"))
        return list(found.groups()) if found else None

    def __call__(
        self, caller: Caller, names: list[str], query: Mapping[str, str], body: Any
    ) -> BaseModel | bytes:
        """Run the operation for a request."""
        arguments: list[Any] = [caller, *names]
        if self.body is not None:
            arguments.append(body if isinstance(body, self.body) else self.body.model_validate(body or {}))
        if self.query:
            arguments.append(query)
        if self.upload:
            arguments.append(Path(body))
        return self.function(*arguments)


TASKS = "/annotation/tasks"
RECORD = TASKS + "/{name}/records/{record}"
OPERATIONS = [
    Op("GET", TASKS, list_tasks, members=True),
    Op("POST", TASKS, create_task, TaskRequest, members=True),
    Op("GET", TASKS + "/{name}", show_task),
    Op("PATCH", TASKS + "/{name}", update_task, TaskUpdateRequest, members=True),
    Op("DELETE", TASKS + "/{name}", delete_task),
    Op("GET", TASKS + "/{name}/queue", queue, query=True),
    Op("POST", TASKS + "/{name}/publish", publish_task, PublishRequest),
    Op("GET", TASKS + "/{name}/export", export_labels, query=True),
    Op("POST", TASKS + "/{name}/import", import_labels, query=True, upload=True),
    Op("GET", RECORD, show_record),
    Op("PUT", RECORD + "/label", save_label, LabelRequest),
    Op("POST", RECORD + "/review", review_label, ReviewRequest),
    Op("GET", RECORD + "/history", label_history),
]
