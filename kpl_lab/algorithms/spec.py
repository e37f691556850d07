"""Parse and validate `environment.yml` (version 1) into typed models."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .. import documents
from ..documents import node_value
from .errors import AlgorithmError, Problem

ENVIRONMENT_FILE = "environment.yml"
SPEC_VERSION = 1
FUNCTIONS = ("train", "test", "infer", "deploy", "compile")
KEY_PATTERN = re.compile(r"^[A-Za-z0-9_-]+$")

_TOP_KEYS = ("version", "image", *FUNCTIONS)
_IMAGE_KEYS = ("from_image", "runs")
_FUNCTION_KEYS = ("resource", "inputs", "outputs", "cmd", "output")
_RESOURCE_KEYS = ("limits", "requests", "workers")
_AMOUNT_KEYS = ("cpu", "gpu", "npu", "memory", "shm")
_PORT_KEYS = ("key", "name", "optional")


@dataclass(frozen=True)
class Amounts:
    """Resource amounts of `limits` or `requests`; memory and shm in MB, None when not given."""

    cpu: float | None = None
    gpu: int | None = None
    npu: int | None = None
    memory: int | None = None
    shm: int | None = None


@dataclass(frozen=True)
class Resource:
    """The `resource` of one function: limits and optional requests of each worker, and the workers."""

    limits: Amounts = field(default_factory=Amounts)
    requests: Amounts | None = None
    workers: int = 1


@dataclass(frozen=True)
class Port:
    """One input or output of a function: `key` (the folder name), a display `name`; an input may be `optional`."""

    key: str
    name: str
    optional: bool = False


@dataclass(frozen=True)
class FunctionSpec:
    """One function of an algorithm (train, test, infer, deploy or compile)."""

    name: str
    cmd: str
    resource: Resource = field(default_factory=Resource)
    inputs: tuple[Port, ...] = ()
    outputs: tuple[Port, ...] = ()
    output: str | None = None


@dataclass(frozen=True)
class Image:
    """The environment: `from_image` (container base) and `runs` (build lines)."""

    from_image: str | None = None
    runs: tuple[str, ...] = ()


@dataclass(frozen=True)
class EnvironmentSpec:
    """A validated environment.yml."""

    version: int
    image: Image
    functions: dict[str, FunctionSpec]

    def function(self, name: str) -> FunctionSpec:
        """Return one function, or raise AlgorithmError naming the ones defined."""
        if name not in self.functions:
            defined = ", ".join(self.functions) or "none"
            raise AlgorithmError(Problem(name, f"the algorithm has no {name} function (defined: {defined})"))
        return self.functions[name]

    def to_dict(self) -> dict:
        """Return a JSON-serialisable form."""
        return asdict(self)


def load_environment(path: str | Path) -> EnvironmentSpec:
    """Read and validate an environment.yml file."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise AlgorithmError(Problem("", f"cannot read the file: {exc.strerror}", path.name)) from exc
    return parse_environment(data, file=path.name)


def parse_environment(text: str | bytes, file: str = ENVIRONMENT_FILE) -> EnvironmentSpec:
    """Validate environment.yml text; raise AlgorithmError listing every problem."""
    root = compose_yaml(text, file)
    checker = _Checker(file)
    spec = checker.environment(root)
    if checker.problems:
        raise AlgorithmError(sorted(checker.problems, key=lambda problem: problem.line or 0))
    assert spec is not None
    return spec


def compose_yaml(
    text: str | bytes, file: str, error: type[AlgorithmError] = AlgorithmError
) -> yaml.Node | None:
    """Compose YAML into nodes (which keep line numbers); raise AlgorithmError on a syntax error or a limit.

    Bounded as every user document is (kpl_lab.documents): no anchors or aliases, nesting and size capped.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise error(Problem("", f"not UTF-8 text (byte {exc.start})", file)) from exc
    try:
        return documents.compose_yaml(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        what = "; ".join(part for part in (exc.context, exc.problem) if part)
        if not isinstance(exc, documents.DocumentError):
            what = f"invalid YAML: {what}"
        line = mark.line + 1 if mark else None
        column = mark.column + 1 if mark else None
        raise error(Problem("", what, file, line, column)) from exc
    except yaml.YAMLError as exc:
        raise error(Problem("", f"invalid YAML: {exc}", file)) from exc


def shown(value: Any) -> str:
    """Show a value the way the user wrote it in YAML (strings quoted)."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)


def suggestion(word: str, choices: tuple[str, ...] | list[str]) -> str:
    """Return '; did you mean "x"?' for the closest choice, or a list of the valid ones."""
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    if close:
        return f'; did you mean "{close[0]}"?'
    return f" (expected one of: {', '.join(choices)})"


def node_line(node: yaml.Node) -> int:
    """Return the 1-based line where a node starts."""
    return node.start_mark.line + 1


class _Checker:
    """Walk the composed nodes, building the models and collecting every problem."""

    def __init__(self, file: str):
        self.file = file
        self.problems: list[Problem] = []

    def problem(self, path: str, message: str, node: yaml.Node | None) -> None:
        self.problems.append(Problem(path, message, self.file, node_line(node) if node is not None else None))

    def mapping(
        self, node: yaml.Node, path: str, allowed: tuple[str, ...], what: str
    ) -> dict[str, yaml.Node] | None:
        """Return {key: value node}; report a non-mapping, duplicate keys and unknown keys."""
        if not isinstance(node, yaml.MappingNode):
            self.problem(path, f"expected {what}, got {shown(node_value(node))}", node)
            return None
        items: dict[str, yaml.Node] = {}
        first_line: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = node_value(key_node)
            child = f"{path}.{key}" if path else str(key)
            if not isinstance(key, str):
                self.problem(child, "field names must be text", key_node)
                continue
            if key in items:
                self.problem(child, f"duplicate field (first defined at line {first_line[key]})", key_node)
            elif key not in allowed:
                self.problem(child, f"unknown field{suggestion(key, allowed)}", key_node)
                continue
            items[key] = value_node
            first_line.setdefault(key, node_line(key_node))
        return items

    def environment(self, root: yaml.Node | None) -> EnvironmentSpec | None:
        if root is None:
            self.problems.append(
                Problem("", "the file is empty; expected version, image and functions", self.file, 1)
            )
            return None
        items = self.mapping(root, "", _TOP_KEYS, "a mapping of version, image and functions")
        if items is None:
            return None
        version = SPEC_VERSION
        if "version" in items:
            value = node_value(items["version"])
            if value != SPEC_VERSION or isinstance(value, bool):
                self.problem(
                    "version",
                    f"unsupported version {shown(value)}; this platform reads version 1",
                    items["version"],
                )
        image = self.image(items["image"]) if "image" in items else Image()
        functions = {}
        for key_node, value_node in root.value:  # a duplicated function is checked too, the last one kept
            name = node_value(key_node)
            if name in FUNCTIONS:
                function = self.function(name, value_node, key_node)
                if function is not None and value_node is items[name]:
                    functions[name] = function
        functions = {name: functions[name] for name in FUNCTIONS if name in functions}
        if not any(name in items for name in FUNCTIONS):
            self.problem("", f"no function defined; expected at least one of {', '.join(FUNCTIONS)}", root)
        return EnvironmentSpec(version=version, image=image or Image(), functions=functions)

    def image(self, node: yaml.Node) -> Image | None:
        if isinstance(node, yaml.ScalarNode) and node_value(node) is None:
            return Image()
        items = self.mapping(node, "image", _IMAGE_KEYS, "a mapping with from_image and runs")
        if items is None:
            return None
        from_image = None
        if "from_image" in items:
            value = node_value(items["from_image"])
            if value is not None and not (isinstance(value, str) and value.strip()):
                self.problem(
                    "image.from_image",
                    f"expected an image name as text, got {shown(value)}",
                    items["from_image"],
                )
            elif value is not None:
                from_image = value.strip()
        runs: list[str] = []
        if "runs" in items:
            runs = self.runs(items["runs"])
        return Image(from_image=from_image, runs=tuple(runs))

    def runs(self, node: yaml.Node) -> list[str]:
        if isinstance(node, yaml.ScalarNode) and node_value(node) is None:
            return []
        if not isinstance(node, yaml.SequenceNode):
            self.problem("image.runs", f"expected a list of shell lines, got {shown(node_value(node))}", node)
            return []
        lines = []
        for index, item in enumerate(node.value):
            value = node_value(item)
            if not isinstance(value, str) or not value.strip():
                self.problem(
                    f"image.runs[{index}]", f"expected a shell line as text, got {shown(value)}", item
                )
            else:
                lines.append(value)
        return lines

    def function(self, name: str, node: yaml.Node, key_node: yaml.Node) -> FunctionSpec | None:
        items = self.mapping(node, name, _FUNCTION_KEYS, "a mapping with resource, inputs, outputs and cmd")
        if items is None:
            return None
        resource = self.resource(f"{name}.resource", items["resource"]) if "resource" in items else Resource()
        inputs = self.ports(f"{name}.inputs", items["inputs"]) if "inputs" in items else ()
        outputs = self.ports(f"{name}.outputs", items["outputs"]) if "outputs" in items else ()
        cmd = ""
        if "cmd" not in items:
            self.problem(
                f"{name}.cmd", "missing; the command that starts this function is required", key_node
            )
        else:
            value = node_value(items["cmd"])
            if not isinstance(value, str) or not value.strip():
                self.problem(
                    f"{name}.cmd", f"expected a command line as text, got {shown(value)}", items["cmd"]
                )
            else:
                cmd = value.strip()
        output = None
        if "output" in items:
            value = node_value(items["output"])
            if not isinstance(value, str) or not value.strip():
                self.problem(
                    f"{name}.output", f"expected a path as text, got {shown(value)}", items["output"]
                )
            else:
                output = value
        return FunctionSpec(
            name=name, cmd=cmd, resource=resource or Resource(), inputs=inputs, outputs=outputs, output=output
        )

    def resource(self, path: str, node: yaml.Node) -> Resource | None:
        items = self.mapping(node, path, _RESOURCE_KEYS, "a mapping with limits, requests and workers")
        if items is None:
            return None
        workers = 1
        if "workers" in items:
            value = node_value(items["workers"])
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                workers = value
            else:
                self.problem(
                    f"{path}.workers", f"expected a positive integer, got {shown(value)}", items["workers"]
                )
        limits = self.amounts(f"{path}.limits", items["limits"]) if "limits" in items else Amounts()
        requests = self.amounts(f"{path}.requests", items["requests"]) if "requests" in items else None
        if limits is not None and requests is not None:
            request_nodes = self.mapping_silently(items["requests"])
            for key in _AMOUNT_KEYS:
                asked, limit = getattr(requests, key), getattr(limits, key)
                if asked is not None and limit is not None and asked > limit:
                    self.problem(
                        f"{path}.requests.{key}",
                        f"request {_plain(asked)} is above the limit {_plain(limit)}",
                        request_nodes.get(key, items["requests"]),
                    )
        return Resource(limits=limits or Amounts(), requests=requests, workers=workers)

    @staticmethod
    def mapping_silently(node: yaml.Node) -> dict[str, yaml.Node]:
        return {node_value(k): v for k, v in node.value} if isinstance(node, yaml.MappingNode) else {}

    def amounts(self, path: str, node: yaml.Node) -> Amounts | None:
        items = self.mapping(node, path, _AMOUNT_KEYS, "a mapping of cpu, gpu, npu, memory and shm")
        if items is None:
            return None
        values: dict[str, Any] = {}
        checks: dict[str, tuple[Callable[[Any], bool], str]] = {
            "cpu": (_is_positive_number, "expected a number of CPU cores above 0"),
            "gpu": (_is_count, "expected a whole number of GPUs (0 or more)"),
            "npu": (_is_count, "expected a whole number of NPUs (0 or more)"),
            "memory": (_is_megabytes, "expected megabytes as an integer"),
            "shm": (_is_megabytes, "expected megabytes as an integer"),
        }
        for key, value_node in items.items():
            value = node_value(value_node)
            valid, expected = checks[key]
            if not valid(value):
                self.problem(f"{path}.{key}", f"{expected}, got {shown(value)}", value_node)
            else:
                values[key] = float(value) if key == "cpu" else value
        return Amounts(**values)

    def ports(self, path: str, node: yaml.Node) -> tuple[Port, ...]:
        if isinstance(node, yaml.ScalarNode) and node_value(node) is None:
            return ()
        if not isinstance(node, yaml.SequenceNode):
            self.problem(path, f"expected a list of {{key, name}}, got {shown(node_value(node))}", node)
            return ()
        ports = []
        seen: dict[str, int] = {}
        for index, item in enumerate(node.value):
            item_path = f"{path}[{index}]"
            items = self.mapping(item, item_path, _PORT_KEYS, "a mapping with key, name and optional")
            if items is None:
                continue
            if "key" not in items:
                self.problem(f"{item_path}.key", "missing; every input and output needs a key", item)
                continue
            key = node_value(items["key"])
            if isinstance(key, int) and not isinstance(key, bool):
                key = str(key)
            if not isinstance(key, str) or not KEY_PATTERN.match(key):
                self.problem(
                    f"{item_path}.key",
                    f"expected letters, digits, '_' or '-', got {shown(key)}",
                    items["key"],
                )
                continue
            if key in seen:
                self.problem(
                    f"{item_path}.key",
                    f'duplicate key "{key}" (first used at line {seen[key]})',
                    items["key"],
                )
                continue
            seen[key] = node_line(items["key"])
            name = key
            if "name" in items:
                value = node_value(items["name"])
                if not isinstance(value, str) or not value.strip():
                    self.problem(
                        f"{item_path}.name",
                        f"expected a display name as text, got {shown(value)}",
                        items["name"],
                    )
                else:
                    name = value
            optional = False
            if "optional" in items:
                optional = node_value(items["optional"])
                if not isinstance(optional, bool):
                    self.problem(
                        f"{item_path}.optional",
                        f"expected true or false, got {shown(optional)}",
                        items["optional"],
                    )
                    continue
            ports.append(Port(key=key, name=name, optional=optional))
        return tuple(ports)


def _plain(value: float | int) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_positive_number(value: Any) -> bool:
    return _is_number(value) and value > 0 and value == value and value != float("inf")


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_megabytes(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
