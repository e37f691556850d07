"""What an executor needs to start one job: the launch description."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..algorithms.spec import FunctionSpec


@dataclass
class Resources:
    """Resources of one job or notebook; memory and shm in MB, devices by kind.

    A job of several `workers` holds these amounts for each worker.
    """

    cpu: float = 1.0
    memory: int = 1024
    shm: int = 64
    devices: dict[str, int] = field(default_factory=dict)  # e.g. {"gpu": 1, "npu": 0}
    workers: int = 1  # distributed training: processes (pods) started together as one job

    @classmethod
    def of(cls, function: FunctionSpec, defaults: Resources | None = None) -> Resources:
        """Return an environment.yml function's limits, filling gaps from `defaults`."""
        base = defaults or cls()
        limits = function.resource.limits
        devices = dict(base.devices)
        for kind in ("gpu", "npu"):
            if getattr(limits, kind) is not None:
                devices[kind] = getattr(limits, kind)
        return cls(
            cpu=limits.cpu if limits.cpu is not None else base.cpu,
            memory=limits.memory if limits.memory is not None else base.memory,
            shm=limits.shm if limits.shm is not None else base.shm,
            devices=devices,
            workers=function.resource.workers,
        )

    def to_json(self) -> dict:
        """Return the JSON form, which `Resources(**data)` reads."""
        return {
            "cpu": self.cpu,
            "memory": self.memory,
            "shm": self.shm,
            "devices": dict(self.devices),
            "workers": self.workers,
        }

    def total(self) -> Resources:
        """Return what all the workers hold together."""
        return Resources(
            cpu=self.cpu * self.workers,
            memory=self.memory * self.workers,
            shm=self.shm * self.workers,
            devices={kind: count * self.workers for kind, count in self.devices.items()},
        )


@dataclass
class JobLaunch:
    """Everything needed to run one function of one algorithm version as a process or pod."""

    job_id: str
    project: str
    function: str  # train | test | infer | deploy | compile
    cmd: str
    algorithm_dir: Path  # the immutable algorithm version folder (working directory)
    run_dir: Path  # the job's run folder (docs/job-contract.md)
    image: str | None = None  # environment.yml image.from_image (Kubernetes)
    runs: list[str] = field(default_factory=list)  # environment.yml image.runs (local venv)
    inputs: dict[str, Path] = field(default_factory=dict)  # key -> dataset/model version folder
    outputs: list[str] = field(default_factory=list)  # output keys
    parameters: dict = field(default_factory=dict)
    limits: Resources = field(default_factory=Resources)
    requests: Resources | None = None
    assigned_devices: dict[str, list[int]] = field(default_factory=dict)  # kind -> device indexes
    env: dict[str, str] = field(default_factory=dict)  # extra variables
    user: str = ""  # the hub user who submitted it ("": the platform's own account runs it)

    def to_json(self) -> dict:
        """Return the JSON form, which `from_json` reads (written out: `dataclasses.asdict` deep-copies, on every start)."""
        return {
            "job_id": self.job_id,
            "project": self.project,
            "function": self.function,
            "cmd": self.cmd,
            "algorithm_dir": str(self.algorithm_dir),
            "run_dir": str(self.run_dir),
            "image": self.image,
            "runs": list(self.runs),
            "inputs": {key: str(path) for key, path in self.inputs.items()},
            "outputs": list(self.outputs),
            "parameters": self.parameters,
            "limits": self.limits.to_json(),
            "requests": None if self.requests is None else self.requests.to_json(),
            "assigned_devices": {kind: list(indexes) for kind, indexes in self.assigned_devices.items()},
            "env": dict(self.env),
            "user": self.user,
        }

    @classmethod
    def from_json(cls, data: dict) -> JobLaunch:
        data = dict(data)
        data["algorithm_dir"] = Path(data["algorithm_dir"])
        data["run_dir"] = Path(data["run_dir"])
        data["inputs"] = {k: Path(v) for k, v in data.get("inputs", {}).items()}
        data["limits"] = Resources(**data.get("limits", {}))
        if data.get("requests") is not None:
            data["requests"] = Resources(**data["requests"])
        return cls(**data)
