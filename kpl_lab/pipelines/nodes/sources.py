"""Sources: a catalog dataset's part or a catalog model, the version the run's check found."""

from __future__ import annotations

from pydantic import Field

from ..schema import PORT, Output
from .base import Params, PlatformNode, Result, Step


class DatasetParams(Params):
    dataset: str = Field(description="catalog dataset: NAME (latest version) or NAME:VERSION")
    part: str | None = Field(None, description="part to read (default: root, or the first part)")


class DatasetNode(PlatformNode):
    name, category, params, ports = "dataset", "source", DatasetParams, ()
    description = "A catalog dataset (latest version unless pinned)."

    def check(self, p, inputs, catalog, report):
        try:
            ref, part, schema = catalog.dataset(p.dataset, p.part)
        except LookupError as err:
            report("dataset", str(err))
            return None
        return {PORT: Output("dataset", schema, catalog=True, ref=ref, part=part)}

    def run(self, step: Step):
        checked = step.node.outputs[PORT]
        catalog = step.runner.platform.catalog
        row = catalog.get_dataset(step.project, checked.ref)
        folder = catalog.path(row)
        step.log(f"dataset {row.ref}, part {checked.part}")
        out = {
            "folder": str(folder),
            "part": checked.part,
            "ref": f"dataset:{row.ref}",
            "rows": (row.parts or {}).get(checked.part),
            "content": f"dataset:{row.ref}/{checked.part}",
            "path": step.runner.relative(folder),
        }
        return Result({PORT: out}), False, None


class ModelParams(Params):
    model: str = Field(description="catalog model: NAME (latest version) or NAME:VERSION")


class ModelNode(PlatformNode):
    name, category, params, ports = "model", "source", ModelParams, ()
    description = "A catalog model (latest version unless pinned)."

    def check(self, p, inputs, catalog, report):
        try:
            ref = catalog.model(p.model)
        except LookupError as err:
            report("model", str(err))
            return None
        return {PORT: Output("model", catalog=True, ref=ref)}

    def run(self, step: Step):
        row = step.runner.platform.catalog.get_model(step.project, step.node.outputs[PORT].ref)
        step.log(f"model {row.ref}")
        out = {"ref": f"model:{row.ref}", "content": f"model:{row.ref}", "rows": None, "path": row.path}
        return Result({PORT: out}), False, None
