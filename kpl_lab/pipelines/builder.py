"""The fluent Python API: `Pipeline("x").dataset(...).regex_extract(...)…save(...)` writes the same YAML."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .format import ALGORITHM_FUNCTIONS, Spec, parse


class Step:
    """A node of a pipeline being built; its methods add the nodes that read its output."""

    def __init__(self, pipeline: Pipeline, node_id: str, port: str | None = None):
        self.pipeline = pipeline
        self.id = node_id
        self.port = port

    @property
    def ref(self) -> str:
        """Return how an input names this output: `node` or `node.port`."""
        return f"{self.id}.{self.port}" if self.port else self.id

    def __getitem__(self, port: str) -> Step:
        """Return one named output of this node (a split's part, an algorithm's output key)."""
        return Step(self.pipeline, self.id, port)

    def then(self, type_name: str, id: str | None = None, **params: Any) -> Step:
        """Add a node of any type reading this output as `input`."""
        return self.pipeline.add(type_name, id, input=self.ref, **params)

    def regex_extract(self, field: str, pattern: str, id: str | None = None) -> Step:
        return self.then("regex_extract", id, field=field, pattern=pattern)

    def select(self, where: str, id: str | None = None) -> Step:
        return self.then("select", id, where=where)

    def rename(self, fields: dict[str, str], id: str | None = None) -> Step:
        return self.then("rename", id, fields=dict(fields))

    def left_join(self, right: Step, on: str, fields: list[str] | None = None, id: str | None = None) -> Step:
        params: dict[str, Any] = {"left": self.ref, "right": right.ref, "on": on}
        if fields is not None:
            params["fields"] = list(fields)
        return self.pipeline.add("left_join", id, **params)

    def label_id(self, field: str, output: str, id: str | None = None) -> Step:
        return self.then("label_id", id, field=field, output=output)

    def parse_voc(self, field: str = "content", id: str | None = None) -> Step:
        return self.then("parse_voc", id, field=field)

    def parse_labelme(self, field: str = "content", id: str | None = None) -> Step:
        return self.then("parse_labelme", id, field=field)

    def parse_coco(self, field: str = "content", id: str | None = None) -> Step:
        return self.then("parse_coco", id, field=field)

    def split(self, ratios: dict[str, float], seed: int = 0, id: str | None = None) -> Step:
        return self.then("split", id, ratios=dict(ratios), seed=seed)

    def sample(self, fraction: float, seed: int = 0, id: str | None = None) -> Step:
        return self.then("sample", id, fraction=fraction, seed=seed)

    def shuffle(self, seed: int = 0, id: str | None = None) -> Step:
        return self.then("shuffle", id, seed=seed)

    def save(self, name: str, id: str | None = None) -> Step:
        """Register this output as catalog dataset NAME (a model output: as model NAME)."""
        kind = "save_model" if self.pipeline.is_model(self) else "save_dataset"
        return self.then(kind, id or self.pipeline._free("save"), name=name)

    def _algorithm(
        self, function: str, algorithm: str, key: str = "data", id: str | None = None, **params: Any
    ) -> Step:
        inputs = {key: self.ref, **{k: v.ref for k, v in (params.pop("inputs", None) or {}).items()}}
        params = {k: v for k, v in params.items() if v is not None}
        return self.pipeline.add(function, id, algorithm=algorithm, inputs=inputs, **params)

    def to_yaml(self) -> str:
        return self.pipeline.to_yaml()

    def write(self, path: str | Path) -> Path:
        return self.pipeline.write(path)


def _function(function: str):
    def method(
        self: Step,
        algorithm: str,
        key: str = "data",
        inputs: dict[str, Step] | None = None,
        parameters: dict | None = None,
        resources: dict | None = None,
        id: str | None = None,
    ) -> Step:
        return self._algorithm(
            function, algorithm, key, id, inputs=inputs, parameters=parameters, resources=resources
        )

    method.__name__ = function
    method.__doc__ = f"Run the algorithm's {function} function on this output (as input KEY)."
    return method


for _name in ALGORITHM_FUNCTIONS:
    setattr(Step, _name, _function(_name))


class Pipeline:
    """A pipeline built in Python; `to_yaml()` is the file the editors and the CLI read."""

    def __init__(self, name: str, description: str = ""):
        self.name = name
        self.description = description
        self.nodes: dict[str, dict[str, Any]] = {}

    @classmethod
    def load(cls, path: str | Path) -> Pipeline:
        """Read a pipeline file to go on building it."""
        return cls.from_spec(parse(Path(path).read_text(encoding="utf-8")))

    @classmethod
    def from_spec(cls, spec: Spec) -> Pipeline:
        pipeline = cls(spec.name, spec.description)
        pipeline.nodes = {k: dict(v) for k, v in spec.nodes.items()}
        return pipeline

    def __getitem__(self, node_id: str) -> Step:
        if node_id not in self.nodes:
            raise KeyError(f"no node {node_id!r} (nodes: {', '.join(self.nodes)})")
        return Step(self, node_id)

    def add(self, type_name: str, id: str | None = None, **params: Any) -> Step:
        """Add a node; its id is the type name (numbered when taken) unless given."""
        node_id = id or self._free(type_name)
        if node_id in self.nodes:
            raise ValueError(f"node id {node_id!r} is taken")
        self.nodes[node_id] = {"type": type_name, **params}
        return Step(self, node_id)

    def _free(self, base: str) -> str:
        if base not in self.nodes:
            return base
        n = 2
        while f"{base}_{n}" in self.nodes:
            n += 1
        return f"{base}_{n}"

    def is_model(self, step: Step) -> bool:
        """Return whether a step's output is a model (an algorithm's output or a model node)."""
        node = self.nodes[step.id]
        return node["type"] in (*ALGORITHM_FUNCTIONS, "model", "save_model")

    def dataset(self, dataset: str, part: str | None = None, id: str | None = None) -> Step:
        """Add a catalog dataset (NAME or NAME:VERSION) as a source."""
        params = {"dataset": dataset, **({"part": part} if part else {})}
        return self.add("dataset", id or self._free("raw" if not self.nodes else "dataset"), **params)

    def model(self, model: str, id: str | None = None) -> Step:
        """Add a catalog model as a source."""
        return self.add("model", id, model=model)

    def sql(self, query: str, inputs: dict[str, Step], id: str | None = None) -> Step:
        """Add a SELECT over named inputs."""
        return self.add("sql", id, inputs={k: v.ref for k, v in inputs.items()}, query=query)

    def spec(self) -> Spec:
        return Spec(self.name, self.nodes, self.description)

    def to_yaml(self) -> str:
        return self.spec().to_yaml()

    def write(self, path: str | Path) -> Path:
        """Write the pipeline file."""
        path = Path(path)
        path.write_text(self.to_yaml(), encoding="utf-8")
        return path
