"""Pipelines: validate a file, start, follow and stop runs, list templates."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .base import Body, utc

NodeState = Literal["pending", "running", "succeeded", "cached", "failed", "skipped", "stopped"]
RunState = Literal["running", "succeeded", "failed", "stopped"]


class PipelineText(BaseModel):
    """A pipeline file's text, as the editors hold it."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(description="the YAML of a *.kpl-pipeline.yaml file")


class RunRequest(PipelineText):
    """What to run: the file, and whether to reuse the cache."""

    path: str = Field("", description="where the file lives (shown in the history)")
    from_node: str | None = Field(None, description="run this node and what follows it again; reuse the rest")
    fresh: bool = Field(False, description="run every node again (no cache)")


class RerunRequest(BaseModel):
    """How to run an earlier run's file again."""

    model_config = ConfigDict(extra="forbid")

    from_node: str | None = None
    fresh: bool = False


class PipelineField(Body):
    """One field of a schema flowing along an edge."""

    name: str
    type: str = Field(description="String, Int, Float, ByteArray, Bool, List[…], Dict{…}")
    nullable: bool


class PipelinePort(Body):
    """What an edge carries: a dataset of known fields, or a model."""

    kind: Literal["dataset", "model"]
    fields: list[PipelineField] | None = Field(description="null for a model or a job's output")


class PipelineProblem(Body):
    """One mistake: node, parameter, line of the file, message."""

    node: str | None
    parameter: str | None
    line: int | None
    message: str


class PipelineNodeCheck(Body):
    """A node as validation saw it."""

    id: str
    type: str
    inputs: dict[str, PipelinePort]
    outputs: dict[str, PipelinePort]
    problems: list[PipelineProblem]


class PipelineValidation(Body):
    """Every node's input and output schemas, and every problem."""

    name: str | None
    ok: bool
    order: list[str] = Field(description="nodes in run order (those in a cycle left out)")
    nodes: list[PipelineNodeCheck]
    problems: list[PipelineProblem]


class PipelineNodeRun(Body):
    """One node of a run."""

    node: str
    type: str
    state: NodeState
    cached: bool
    started: datetime | None
    finished: datetime | None
    rows_in: int | None
    rows_out: int | None
    job_id: str | None
    outputs: dict[str, dict] = Field(description="port -> {path (under the storage root), ref, rows}")
    log: str


class PipelineRun(Body):
    """One run of a pipeline file."""

    id: str
    project: str
    name: str
    path: str
    state: RunState
    reason: str
    from_node: str | None
    fresh: bool
    created: datetime
    finished: datetime | None
    nodes: list[PipelineNodeRun]


class PipelineRunList(Body):
    """Runs, newest first."""

    runs: list[PipelineRun]


class PipelineRecords(Body):
    """The first records of a node's output in a run."""

    port: str
    total: int = Field(description="records in the output")
    fields: list[PipelineField]
    records: list[dict[str, Any]] = Field(description='bytes values as {"$bytes": size}')


class PipelineTemplate(Body):
    """A template shipped with KPL Lab."""

    name: str
    text: str


class PipelineTemplateList(Body):
    """The shipped templates."""

    templates: list[PipelineTemplate]


class PipelineNodeType(Body):
    """A node type the editors offer: its parameters' JSON schema and which of them name inputs."""

    name: str
    category: Literal["source", "processor", "sink", "algorithm"]
    description: str
    inputs: list[str] = Field(description="parameters naming one input node (input, left, right)")
    named_inputs: bool = Field(description="whether `inputs: {key: node}` names its inputs")
    parameters: dict[str, Any] = Field(description="JSON schema of the parameters (besides type)")


class PipelineNodeTypeList(Body):
    """Every node type, in the order the editors list them."""

    node_types: list[PipelineNodeType]


def node_type_body(node_type) -> PipelineNodeType:
    """Return the API form of a pipelines.nodes.NodeType (what the editors show of it)."""
    return PipelineNodeType(
        name=node_type.name,
        category=node_type.category,
        description=node_type.description,
        inputs=list(node_type.ports),
        named_inputs=node_type.named_inputs,
        parameters=node_type.parameter_schema(),
    )


def run_body(run) -> PipelineRun:
    """Return the API form of a PipelineRun row."""
    return PipelineRun(
        id=run.id,
        project=run.project.name,
        name=run.name,
        path=run.path,
        state=run.state,
        reason=run.reason,
        from_node=run.from_node,
        fresh=run.fresh,
        created=utc(run.created),
        finished=utc(run.finished),
        nodes=[
            PipelineNodeRun(
                node=n.node,
                type=n.type,
                state=n.state,
                cached=n.cached,
                started=utc(n.started),
                finished=utc(n.finished),
                rows_in=n.rows_in,
                rows_out=n.rows_out,
                job_id=n.job_id,
                outputs=n.outputs or {},
                log=n.log,
            )
            for n in run.nodes
        ],
    )
