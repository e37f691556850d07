"""Annotation: tasks, queues, records, labels, review, history; each method one call of `kpl_lab.annotation.operations`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tornado import web

from ...annotation import operations as op
from ...api.annotation import LabelRequest, ReviewRequest, TaskRequest, TaskUpdateRequest
from ..base import KPLHandler


class AnnotationHandler(KPLHandler):
    """A handler of annotation routes: it answers what an operation of `kpl_lab.annotation.operations` answers."""

    async def answer(
        self, operation: Callable, *arguments: Any, members: bool = False, status: int = 200
    ) -> None:
        """Run an operation for the caller off the event loop and answer its model."""
        caller = op.Caller(
            platform=self.platform,
            project=self.project,
            user=self.current_user.username,
            admin=self.app.is_admin(self.current_user),
            members=await self.app.project_members(self.project) if members else None,
            api_base=self.api_base,
        )
        self.reply(await self.blocking(operation, caller, *arguments), status=status)

    def query(self) -> dict[str, str]:
        """Return the query arguments (the last value of each)."""
        return {name: self.get_query_argument(name) for name in self.request.query_arguments}


class AnnotationTasksHandler(AnnotationHandler):
    """GET: the project's tasks with their progress; POST: create a task."""

    @web.authenticated
    async def get(self) -> None:
        """List tasks."""
        await self.answer(op.list_tasks, members=True)

    @web.authenticated
    async def post(self) -> None:
        """Create a task."""
        await self.answer(op.create_task, self.body_as(TaskRequest), members=True, status=201)


class AnnotationTaskHandler(AnnotationHandler):
    """GET: one task with its progress; PATCH: change it; DELETE: delete it with its labels."""

    @web.authenticated
    async def get(self, name: str) -> None:
        """Show a task."""
        await self.answer(op.show_task, name)

    @web.authenticated
    async def patch(self, name: str) -> None:
        """Change a task."""
        await self.answer(op.update_task, name, self.body_as(TaskUpdateRequest), members=True)

    @web.authenticated
    async def delete(self, name: str) -> None:
        """Delete a task."""
        await self.answer(op.delete_task, name)


class AnnotationQueueHandler(AnnotationHandler):
    """GET: a page of the task's records of one state, in record or uncertainty order."""

    @web.authenticated
    async def get(self, name: str) -> None:
        """Answer a page of the queue."""
        await self.answer(op.queue, name, self.query())


class AnnotationRecordHandler(AnnotationHandler):
    """GET: one record of a task with its fields, label and suggestion."""

    @web.authenticated
    async def get(self, name: str, record: str) -> None:
        """Show a record."""
        await self.answer(op.show_record, name, record)


class LabelHandler(AnnotationHandler):
    """PUT: save a record's label over the version the annotator loaded."""

    @web.authenticated
    async def put(self, name: str, record: str) -> None:
        """Save a label."""
        await self.answer(op.save_label, name, record, self.body_as(LabelRequest))


class LabelReviewHandler(AnnotationHandler):
    """POST: accept or reject a record's label."""

    @web.authenticated
    async def post(self, name: str, record: str) -> None:
        """Review a label."""
        await self.answer(op.review_label, name, record, self.body_as(ReviewRequest))


class LabelHistoryHandler(AnnotationHandler):
    """GET: every step of a record's label."""

    @web.authenticated
    async def get(self, name: str, record: str) -> None:
        """Answer a label's history."""
        await self.answer(op.label_history, name, record)
