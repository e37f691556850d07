"""Algorithm nodes: an algorithm's train, test, infer, deploy or compile function run as a job."""

from __future__ import annotations

import contextlib
import time
from typing import Any, Literal

from pydantic import Field

from ...errors import Conflict
from ..processors import Stopped
from ..schema import Output
from .base import Params, PlatformNode, Result, Step

JOB_POLL_SECONDS = 0.2


class AlgorithmParams(Params):
    algorithm: str = Field(description="catalog algorithm: NAME or NAME:VERSION")
    inputs: dict[str, str] = Field(
        default_factory=dict, description="environment.yml input key -> node or node.port"
    )
    parameters: dict[str, Any] = Field(default_factory=dict, description="checked against parameter.yml")
    resources: dict[str, Any] | None = Field(
        None, description="cpu, memory, gpu, … (default: environment.yml)"
    )
    outputs: Literal["model", "dataset"] = Field("model", description="what the function's outputs are")


class AlgorithmNode(PlatformNode):
    category, params, ports, named_inputs = "algorithm", AlgorithmParams, (), True

    def __init__(self, function: str):
        self.name = function
        self.description = (
            f"Run the algorithm's {function} function as a job (queued under the project's quota)."
        )

    def check(self, p, inputs, catalog, report):
        try:
            _, ports, outputs = catalog.algorithm(p.algorithm, self.name)
        except LookupError as err:
            report("algorithm", str(err))
            return None
        wanted = [port.key for port in ports]
        optional = {port.key for port in ports if port.optional}
        ok = True
        for key in p.inputs:
            if key not in wanted:
                report(
                    f"inputs.{key}",
                    f"is not an input of {self.name} in environment.yml (inputs: {', '.join(wanted) or 'none'})",
                )
                ok = False
        missing = [k for k in wanted if k not in p.inputs and k not in optional]
        if missing:
            report("inputs", f"environment.yml's {self.name} also needs: {', '.join(missing)}")
            ok = False
        for key, out in inputs.items():
            if out.kind == "dataset" and not out.catalog:
                report(key, "a job reads catalog entries: save this input with a save_dataset node first")
                ok = False
        if not ok:
            return None
        return {key: Output(p.outputs, catalog=True) for key in outputs}

    def run(self, step: Step):
        from ...api.jobs import JobRequest, ResourceRequest

        runner, p = step.runner, step.node.params
        hit = runner.remembered(step)
        if hit is not None:
            return Result(runner.with_paths(step.project, hit)), True, None
        request = JobRequest(
            project=step.project,
            algorithm=p.algorithm,
            function=self.name,
            inputs={param.partition(".")[2]: v["ref"] for param, v in step.inputs.items()},
            parameters=p.parameters,
            resources=ResourceRequest(**p.resources) if p.resources else None,
        )
        jobs = runner.platform.jobs
        job = jobs.submit(request)
        step.log(f"job {job.id} submitted ({job.state})")
        runner.set_node(step.run_id, step.node.id, job_id=job.id)
        while not job.is_final:
            if step.stop.is_set():
                with contextlib.suppress(Conflict):
                    jobs.stop(step.project, job.id, reason="the pipeline run was stopped")
                raise Stopped
            time.sleep(JOB_POLL_SECONDS)
            job = jobs.get(step.project, job.id)
        step.log(f"job {job.id} {job.state}" + (f": {job.reason}" if job.reason else ""))
        if job.state != "succeeded":
            raise RuntimeError(f"job {job.id} {job.state}: {job.reason}")
        outputs = {}
        for port in step.node.outputs:
            ref = (job.outputs.get(port) or {}).get("registered")
            if not ref:
                raise RuntimeError(f"job {job.id} wrote nothing to its output {port!r}")
            outputs[port] = {"ref": ref, "rows": None, "content": ref}
        runner.cache(step.project).remember(step.key, {"outputs": outputs, "job_id": job.id})
        return Result(runner.with_paths(step.project, outputs)), False, job.id
