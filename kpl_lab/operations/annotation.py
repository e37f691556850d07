"""Annotation: tasks, queues, records, labels, review, history, publish, export and import.

Each operation is one call of `kpl_lab.annotation.operations` for the caller; those that
check people against the project's members (a task's annotators and reviewers) ask the host
for them first (`Caller.project_members`; none on a single-user server or a home).
"""

from __future__ import annotations

import asyncio
import functools
import getpass
from typing import Any

from ..api.annotation import LabelRequest, PublishRequest, ReviewRequest, TaskRequest, TaskUpdateRequest
from .caller import Caller
from .spec import Raw
from .uploads import Upload


def _operations():
    """Return `kpl_lab.annotation.operations`, loaded when an annotation route is first asked (it loads pyarrow)."""
    from ..annotation import operations

    return operations


def _for(caller: Caller, members: list[str] | None = None):
    # a command on its own home: the account that runs it labels and reviews
    return _operations().Caller(
        platform=caller.platform,
        project=caller.project,
        user=caller.user or getpass.getuser(),
        admin=caller.is_admin,
        members=members,
        api_base=caller.api_base,
    )


async def _with_members(caller: Caller, function, *arguments: Any) -> Any:
    """Run an operation that checks people, with the project's members, off the event loop."""
    members = await caller.project_members(caller.project) if caller.project_members else None
    call = functools.partial(function, _for(caller, members), *arguments)
    return await asyncio.get_running_loop().run_in_executor(None, call)


def _query(**arguments: Any) -> dict[str, str]:
    """Return query arguments as the request gave them (ints as digits, absent ones left out)."""
    return {key: str(value) for key, value in arguments.items() if value is not None}


async def list_tasks(caller: Caller):
    """List the project's tasks with their progress and the project's members."""
    op = _operations()
    return await _with_members(caller, op.list_tasks)


async def create_task(caller: Caller, body: TaskRequest):
    """Create a task on a dataset version."""
    op = _operations()
    return await _with_members(caller, op.create_task, body)


def show_task(caller: Caller, name: str):
    """Show a task with its progress."""
    op = _operations()
    return op.show_task(_for(caller), name)


async def update_task(caller: Caller, name: str, body: TaskUpdateRequest):
    """Change a task."""
    op = _operations()
    return await _with_members(caller, op.update_task, name, body)


def delete_task(caller: Caller, name: str):
    """Delete a task with its labels."""
    op = _operations()
    return op.delete_task(_for(caller), name)


def queue(caller: Caller, name: str, state: str, order: str, mine: int, after: str | None, limit: int):
    """Answer a page of the task's records of one state."""
    op = _operations()
    query = _query(state=state, order=order, mine=mine, after=after, limit=limit)
    return op.queue(_for(caller), name, query)


def publish(caller: Caller, name: str, body: PublishRequest):
    """Publish the task's accepted labels as a new dataset version."""
    op = _operations()
    return op.publish_task(_for(caller), name, body)


def export(caller: Caller, name: str, format: str, all: int) -> Raw:
    """Answer a zip of the task's labels in a format."""
    op = _operations()
    data = op.export_labels(_for(caller), name, _query(format=format, all=all))
    disposition = {"Content-Disposition": f'attachment; filename="{name}-{format}.zip"'}
    return Raw(data, "application/zip", disposition)


def check_import(caller: Caller, name: str, format: str) -> None:
    """Refuse an unknown format before the archive is stored."""
    op = _operations()
    op.export_format(_query(format=format))


def import_labels(caller: Caller, name: str, format: str, upload: Upload):
    """Label the task's unlabelled records from an uploaded archive."""
    op = _operations()
    return op.import_labels(_for(caller), name, _query(format=format), upload.archive())


def show_record(caller: Caller, name: str, record: str):
    """Show one record of a task with its label and suggestion."""
    op = _operations()
    return op.show_record(_for(caller), name, record)


def save_label(caller: Caller, name: str, record: str, body: LabelRequest):
    """Save a record's label over the version the annotator loaded."""
    op = _operations()
    return op.save_label(_for(caller), name, record, body)


def review(caller: Caller, name: str, record: str, body: ReviewRequest):
    """Accept or reject a record's label."""
    op = _operations()
    return op.review_label(_for(caller), name, record, body)


def history(caller: Caller, name: str, record: str):
    """Answer every step of a record's label."""
    op = _operations()
    return op.label_history(_for(caller), name, record)
