"""Annotation: tasks, queues, records, labels, review, history; each method one call of `kpl_lab.annotation.operations`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tornado import web

from ...annotation import operations as op
from ...api.annotation import LabelRequest, PublishRequest, ReviewRequest, TaskRequest, TaskUpdateRequest
from ..base import KPLHandler
from ..upload import UploadHandler


class AnnotationHandler(KPLHandler):
    """A handler of annotation routes: it answers what an operation of `kpl_lab.annotation.operations` answers."""

    async def answer(
        self, operation: Callable, *arguments: Any, members: bool = False, status: int = 200
    ) -> None:
        """Run an operation for the caller off the event loop and answer its model."""
        self.reply(await self.run(operation, *arguments, members=members), status=status)

    async def run(self, operation: Callable, *arguments: Any, members: bool = False) -> Any:
        """Run an operation for the caller off the event loop; return what it answers."""
        caller = op.Caller(
            platform=self.platform,
            project=self.project,
            user=self.current_user.username,
            admin=self.app.is_admin(self.current_user),
            members=await self.app.project_members(self.project) if members else None,
            api_base=self.api_base,
        )
        return await self.blocking(operation, caller, *arguments)

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


class AnnotationPublishHandler(AnnotationHandler):
    """POST: publish the task's accepted labels as a new dataset version."""

    @web.authenticated
    async def post(self, name: str) -> None:
        """Publish a task."""
        await self.answer(op.publish_task, name, self.body_as(PublishRequest), status=201)


class AnnotationExportHandler(AnnotationHandler):
    """GET: a zip of the task's labels in COCO, VOC, YOLO or Labelme."""

    @web.authenticated
    async def get(self, name: str) -> None:
        """Answer the export."""
        data = await self.run(op.export_labels, name, self.query())
        self.set_header("Content-Disposition", f'attachment; filename="{name}-{self.query()["format"]}.zip"')
        self.finish(data, set_content_type="application/zip")


@web.stream_request_body
class AnnotationImportHandler(UploadHandler, AnnotationHandler):
    """POST: label the task's unlabelled records from an uploaded zip or tar of COCO, VOC, YOLO or Labelme."""

    def check_upload_query(self) -> None:
        """Check the format before the body is stored."""
        op.export_format(self.query())
        self.project  # noqa: B018 - refuse a forbidden project before the body arrives

    @web.authenticated
    async def post(self, name: str) -> None:
        """Import labels."""
        upload = self.finish_upload()
        self.upload_in_use = True
        try:
            await self.answer(op.import_labels, name, self.query(), upload)
        finally:
            self.upload_in_use = False


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
