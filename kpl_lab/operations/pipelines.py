"""Pipelines: validate a file, templates, node types, start/list/show/stop/re-run runs, a node's records."""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..api.pipelines import (
    PipelineNodeTypeList,
    PipelineRecords,
    PipelineRun,
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
from .caller import Caller


def _runner(caller: Caller):
    from ..pipelines.runner import PipelineRunner

    return PipelineRunner(caller.platform)


def in_a_thread(platform) -> Callable[[str, str], None]:
    """Return start_run(project, run_id) that executes a recorded run in a thread of this process (a server's)."""

    def start_run(project: str, run_id: str) -> None:
        from ..pipelines.runner import PipelineRunner

        runner = PipelineRunner(platform)
        threading.Thread(
            target=runner.execute, args=(project, run_id), name=f"pipeline-{run_id}", daemon=True
        ).start()

    return start_run


def validate(caller: Caller, body: PipelineText) -> PipelineValidation:
    """Validate a pipeline file's text: each node's schemas and every problem."""
    from ..pipelines.validate import PlatformCatalog, check

    return PipelineValidation.model_validate(
        check(body.text, PlatformCatalog(caller.platform, caller.project))
    )


def templates(caller: Caller) -> PipelineTemplateList:
    """List the pipeline templates shipped with KPL Lab."""
    from ..pipelines.templates import NAMES, template_text

    return PipelineTemplateList(templates=[PipelineTemplate(name=n, text=template_text(n)) for n in NAMES])


def node_types(caller: Caller) -> PipelineNodeTypeList:
    """List the node types with their parameters' JSON schemas."""
    from ..pipelines.nodes import NODE_TYPES

    return PipelineNodeTypeList(node_types=[node_type_body(t) for t in NODE_TYPES.values()])


def list_runs(caller: Caller, limit: int) -> PipelineRunList:
    """List the project's runs, newest first."""
    return PipelineRunList(runs=[run_body(r) for r in _runner(caller).list(caller.project, limit)])


def start(caller: Caller, body: RunRequest) -> PipelineRun:
    """Record a run of a pipeline file and start executing it in the background."""
    runner = _runner(caller)
    run_id = runner.create(
        caller.project, body.text, body.path, from_node=body.from_node, fresh=body.fresh, user=caller.user
    )
    caller.start_run(caller.project, run_id)
    return run_body(runner.get(caller.project, run_id))


def show_run(caller: Caller, run_id: str) -> PipelineRun:
    """Show one run with its nodes."""
    return run_body(_runner(caller).get(caller.project, run_id))


def stop(caller: Caller, run_id: str) -> PipelineRun:
    """Stop a run."""
    return run_body(_runner(caller).stop(caller.project, run_id))


def rerun(caller: Caller, run_id: str, body: RerunRequest) -> PipelineRun:
    """Run an earlier run's file again: every node (fresh), or from one node, reusing the rest."""
    runner = _runner(caller)
    new_id = runner.rerun(caller.project, run_id, from_node=body.from_node, fresh=body.fresh)
    caller.start_run(caller.project, new_id)
    return run_body(runner.get(caller.project, new_id))


def node_records(caller: Caller, run_id: str, node: str, port: str | None, limit: int) -> PipelineRecords:
    """Answer the first records and fields of a node's output in a run."""
    found = _runner(caller).records(caller.project, run_id, node, port or None, limit)
    return PipelineRecords.model_validate(found)
