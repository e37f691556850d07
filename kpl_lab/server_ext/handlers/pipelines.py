"""Pipelines: validate a file, templates, start/list/show/stop/re-run runs (runs execute in the server)."""

from __future__ import annotations

import threading

from tornado import web

from ...api.pipelines import (
    PipelineNodeTypeList,
    PipelineRecords,
    PipelineRunList,
    PipelineTemplate,
    PipelineTemplateList,
    PipelineText,
    PipelineValidation,
    RerunRequest,
    RunRequest,
    node_type_body,
    run_body,
)
from ..base import KPLHandler


class PipelineBase(KPLHandler):
    """A handler of pipeline runs."""

    async def prepare(self) -> None:
        """Check the project query first: the file-only routes (templates, node types) never read it."""
        await super().prepare()
        if self.current_user is not None:
            self.project  # noqa: B018

    @property
    def runner(self):
        from ...pipelines.runner import PipelineRunner

        return PipelineRunner(self.platform)

    def start(self, run_id: str) -> None:
        """Execute a recorded run in a thread of the server; the history says how it goes."""
        runner, project = self.runner, self.project
        threading.Thread(
            target=runner.execute, args=(project, run_id), name=f"pipeline-{run_id}", daemon=True
        ).start()


class PipelineValidateHandler(PipelineBase):
    """POST: validate a pipeline file's text."""

    @web.authenticated
    async def post(self) -> None:
        """Validate a pipeline."""
        from ...pipelines.validate import PlatformCatalog, check

        request = self.body_as(PipelineText)

        def work() -> PipelineValidation:
            return PipelineValidation.model_validate(
                check(request.text, PlatformCatalog(self.platform, self.project))
            )

        self.reply(await self.blocking(work))


class PipelineTemplatesHandler(PipelineBase):
    """GET: the shipped templates."""

    @web.authenticated
    async def get(self) -> None:
        """List templates."""
        from ...pipelines.templates import NAMES, template_text

        self.reply(
            PipelineTemplateList(templates=[PipelineTemplate(name=n, text=template_text(n)) for n in NAMES])
        )


class PipelineNodeTypesHandler(PipelineBase):
    """GET: the node types with their parameter schemas."""

    @web.authenticated
    async def get(self) -> None:
        """List node types."""
        from ...pipelines.nodes import NODE_TYPES

        self.reply(PipelineNodeTypeList(node_types=[node_type_body(t) for t in NODE_TYPES.values()]))


class PipelineRunsHandler(PipelineBase):
    """GET: the project's runs, newest first; POST: start a run."""

    @web.authenticated
    async def get(self) -> None:
        """List runs."""
        limit = self.query_int("limit", 50, 1, 1000)
        runs = await self.blocking(self.runner.list, self.project, limit)
        self.reply(PipelineRunList(runs=[run_body(r) for r in runs]))

    @web.authenticated
    async def post(self) -> None:
        """Start a run."""
        request = self.body_as(RunRequest)
        user = self.current_user.username

        def work():
            run_id = self.runner.create(
                self.project,
                request.text,
                request.path,
                from_node=request.from_node,
                fresh=request.fresh,
                user=user,
            )
            self.start(run_id)
            return run_body(self.runner.get(self.project, run_id))

        self.reply(await self.blocking(work), status=201)


class PipelineRunHandler(PipelineBase):
    """GET: one run."""

    @web.authenticated
    async def get(self, run_id: str) -> None:
        """Show a run."""
        self.reply(run_body(await self.blocking(self.runner.get, self.project, run_id)))


class PipelineRunStopHandler(PipelineBase):
    """POST: stop a run."""

    @web.authenticated
    async def post(self, run_id: str) -> None:
        """Stop a run."""
        self.reply(run_body(await self.blocking(self.runner.stop, self.project, run_id)))


class PipelineRunRerunHandler(PipelineBase):
    """POST: run an earlier run's file again, all of it or from one node."""

    @web.authenticated
    async def post(self, run_id: str) -> None:
        """Re-run a run."""
        request = self.body_as(RerunRequest)

        def work():
            new_id = self.runner.rerun(self.project, run_id, from_node=request.from_node, fresh=request.fresh)
            self.start(new_id)
            return run_body(self.runner.get(self.project, new_id))

        self.reply(await self.blocking(work), status=201)


class PipelineNodeRecordsHandler(PipelineBase):
    """GET: the first records of a node's output in a run."""

    @web.authenticated
    async def get(self, run_id: str, node: str) -> None:
        """Show a node's first records."""
        port = self.get_query_argument("port", None) or None
        limit = self.query_int("limit", 10, 0, 100)
        answer = await self.blocking(self.runner.records, self.project, run_id, node, port, limit)
        self.reply(PipelineRecords.model_validate(answer))
