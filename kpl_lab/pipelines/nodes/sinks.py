"""Sinks: register a run's dataset or a job's model in the catalog, with lineage to the run."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from ..schema import PORT, Output
from .base import CatalogName, Params, PlatformNode, Result, Step, dataset_of


class SaveDatasetParams(Params):
    input: str
    name: CatalogName = Field(
        description="catalog dataset name; each run adds a version (same content: same version)"
    )
    description: str = ""


class SaveDataset(PlatformNode):
    name, category, params = "save_dataset", "sink", SaveDatasetParams
    description = "Register the input as a catalog dataset version, with lineage to the run."

    def check(self, p, inputs, catalog, report):
        schema = dataset_of(inputs, "input", report)
        return None if schema is None else {PORT: Output("dataset", schema, catalog=True)}

    def run(self, step: Step):
        runner, p = step.runner, step.node.params
        hit = runner.remembered(step)
        if hit is not None:
            return Result(runner.with_paths(step.project, hit)), True, None
        # the node's input as it was written: linked into the catalog, its version its content's hash
        row = runner.platform.catalog.link_dataset(
            step.project, p.name, Path(step.inputs["input"]["folder"]), p.description, lineage=_lineage(step)
        )
        out = {"ref": f"dataset:{row.ref}", "rows": row.record_count, "content": f"dataset:{row.ref}"}
        return _registered(step, out), False, None


class SaveModelParams(Params):
    input: str = Field(description="an algorithm node's model output (node.port) or a model node")
    name: CatalogName = Field(description="catalog model name")
    description: str = ""


class SaveModel(PlatformNode):
    name, category, params = "save_model", "sink", SaveModelParams
    description = "Register a job's model output under a catalog model name."

    def check(self, p, inputs, catalog, report):
        out = inputs.get("input")
        if out is None:
            return None
        if out.kind != "model":
            report("input", "is not a model (an algorithm node's output or a model node)")
            return None
        return {PORT: Output("model", catalog=True)}

    def run(self, step: Step):
        runner, p = step.runner, step.node.params
        hit = runner.remembered(step)
        if hit is not None:
            return Result(runner.with_paths(step.project, hit)), True, None
        catalog = runner.platform.catalog
        model = catalog.get_model(step.project, step.inputs["input"]["ref"].partition(":")[2])
        lineage = {**_lineage(step), "from": model.ref}
        row = catalog.add_model(step.project, p.name, catalog.path(model), p.description, lineage=lineage)
        out = {"ref": f"model:{row.ref}", "rows": None, "content": f"model:{row.ref}"}
        return _registered(step, out), False, None


def _lineage(step: Step) -> dict:
    return {"pipeline": step.pipeline, "run": step.run_id, "node": step.node.id}


def _registered(step: Step, out: dict) -> Result:
    """Remember a registered entry in the cache (reused while it exists); return it as the node's result."""
    step.log(f"registered {out['ref']}")
    step.runner.cache(step.project).remember(step.key, {"outputs": {PORT: out}})
    return Result(step.runner.with_paths(step.project, {PORT: out}))
