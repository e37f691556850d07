"""The pipeline file: `version: 1` YAML with nodes keyed by id, read with each node's line."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .. import documents

SUFFIX = ".kpl-pipeline.yaml"
ALGORITHM_FUNCTIONS = ("train", "test", "infer", "deploy", "compile")  # each a node type running it as a job
NODE_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


class _Loader(documents.SafeLoader):
    """YAML 1.2 booleans: `on:` (a join's key) stays the string "on", as do yes/no/off; bounded."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regex) for tag, regex in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
for _first in "tTfF":
    _Loader.yaml_implicit_resolvers.setdefault(_first, []).insert(
        0, ("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"))
    )


class _Dumper(yaml.SafeDumper):
    """Quote the strings YAML 1.1 readers would take for booleans (on, yes, …); write no aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True  # a value two nodes share is written twice: the reader refuses aliases


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "'" if value.lower() in ("on", "off", "yes", "no", "y", "n") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def load_yaml(text: str) -> Any:
    """Read YAML as pipeline files are read (only true/false are booleans; no aliases, bounded)."""
    return documents.load_yaml(text, _Loader)


class PipelineFile(BaseModel):
    """The top level of a pipeline file."""

    model_config = ConfigDict(extra="forbid")

    version: int = Field(description="format version; only 1 exists")
    name: str = Field(min_length=1, description="pipeline name")
    description: str = ""
    nodes: dict[str, dict[str, Any]] = Field(description="node id -> {type, inputs, parameters}")


@dataclass
class Problem:
    """One mistake in a pipeline: where (node, parameter, line) and what."""

    message: str
    node: str | None = None
    parameter: str | None = None
    line: int | None = None

    def __str__(self) -> str:
        where = ".".join(p for p in (self.node, self.parameter) if p)
        at = f"line {self.line}: " if self.line else ""
        return f"{at}{where}: {self.message}" if where else f"{at}{self.message}"

    def to_dict(self) -> dict:
        return {"node": self.node, "parameter": self.parameter, "line": self.line, "message": self.message}


@dataclass
class Spec:
    """A parsed pipeline: its name and its nodes' raw settings with their lines."""

    name: str
    nodes: dict[str, dict[str, Any]]
    description: str = ""
    lines: dict[str, int] = field(default_factory=dict)  # node id -> line
    param_lines: dict[tuple[str, str], int] = field(default_factory=dict)  # (node, parameter) -> line

    def to_dict(self) -> dict:
        doc: dict[str, Any] = {"version": 1, "name": self.name}
        if self.description:
            doc["description"] = self.description
        doc["nodes"] = self.nodes
        return doc

    def to_yaml(self) -> str:
        """Return the file text (nodes in their order, parameters as written)."""
        return yaml.dump(
            self.to_dict(), Dumper=_Dumper, sort_keys=False, allow_unicode=True, default_flow_style=None
        )


class PipelineSyntaxError(Exception):
    """The file is not a pipeline at all; carries its problems."""

    def __init__(self, problems: list[Problem]):
        super().__init__("; ".join(map(str, problems)))
        self.problems = problems


def _lines(root: yaml.Node | None) -> tuple[dict[str, int], dict[tuple[str, str], int]]:
    """Return the 1-based lines of each node and each node parameter from the YAML nodes."""
    nodes: dict[str, int] = {}
    params: dict[tuple[str, str], int] = {}
    if not isinstance(root, yaml.MappingNode):
        return nodes, params
    for key, value in root.value:
        if key.value != "nodes" or not isinstance(value, yaml.MappingNode):
            continue
        for node_key, node_value in value.value:
            nodes[node_key.value] = node_key.start_mark.line + 1
            if isinstance(node_value, yaml.MappingNode):
                for pkey, _ in node_value.value:
                    params[(node_key.value, pkey.value)] = pkey.start_mark.line + 1
    return nodes, params


def parse(text: str) -> Spec:
    """Parse pipeline YAML; raise PipelineSyntaxError listing what makes it no pipeline."""
    try:
        root = documents.compose_yaml(text, _Loader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = mark.line + 1 if mark else None
        what = "" if isinstance(err, documents.DocumentError) else "not valid YAML: "
        raise PipelineSyntaxError([Problem(f"{what}{getattr(err, 'problem', err)}", line=line)]) from None
    doc = None if root is None else documents.node_value(root)
    lines, param_lines = _lines(root)
    if not isinstance(doc, dict):
        raise PipelineSyntaxError([Problem("a pipeline file is a mapping with version, name and nodes")])
    try:
        model = PipelineFile.model_validate(doc)
    except ValidationError as err:
        raise PipelineSyntaxError(
            [Problem(f"{'.'.join(map(str, e['loc']))}: {e['msg']}") for e in err.errors()]
        ) from None
    if model.version != 1:
        raise PipelineSyntaxError([Problem(f"version: {model.version} is not supported (only 1)")])
    problems = [
        Problem(
            "a node id is letters, digits, _ and - (not starting with a digit or -)",
            node,
            line=lines.get(node),
        )
        for node in model.nodes
        if not NODE_ID.match(str(node))
    ]
    if problems:
        raise PipelineSyntaxError(problems)
    return Spec(model.name, model.nodes, model.description, lines, param_lines)


def load(path: Any) -> Spec:
    """Read and parse a pipeline file."""
    with open(path, encoding="utf-8") as f:
        return parse(f.read())
