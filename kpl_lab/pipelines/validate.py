"""Validation: every node's parameters, edges, cycles and schemas, with every problem found.

A pipeline without problems is the checked pipeline a run keeps (`Validation.to_record`): the
run is checked once, when it is recorded, and runs what was checked (the catalog versions
found, the schemas inferred), never parsing or checking its file again.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pydantic import ValidationError

if TYPE_CHECKING:
    from ..algorithms.spec import Port

from . import sql
from .format import PipelineSyntaxError, Problem, Spec, parse
from .nodes import NODE_TYPES, PORT, Catalog, NodeType
from .schema import Output


@dataclass
class Node:
    """One node as validation saw it: parameters, edges, schemas and problems."""

    id: str
    type: str
    settings: dict = field(default_factory=dict)  # its mapping in the file
    node_type: NodeType | None = None
    params: Any = None
    edges: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # parameter -> (node, port)
    inputs: dict[str, Output] = field(default_factory=dict)
    outputs: dict[str, Output] | None = None
    keep: bool = False  # write the output even when only relational nodes read it
    problems: list[Problem] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "type": self.type,
            "inputs": {k: v.to_dict() for k, v in self.inputs.items()},
            "outputs": {k: v.to_dict() for k, v in (self.outputs or {}).items()},
            "problems": [p.to_dict() for p in self.problems],
        }

    def to_record(self) -> dict:
        """Return the checked node as JSON (see Validation.to_record)."""
        return {
            "type": self.type,
            "params": self.params.model_dump(mode="json"),
            "edges": {k: list(v) for k, v in self.edges.items()},
            "inputs": {k: v.to_record() for k, v in self.inputs.items()},
            "outputs": {k: v.to_record() for k, v in (self.outputs or {}).items()},
            "keep": self.keep,
        }

    @classmethod
    def from_record(cls, node_id: str, data: dict) -> Node:
        node_type = NODE_TYPES[data["type"]]
        return cls(
            node_id,
            data["type"],
            node_type=node_type,
            params=node_type.params.model_construct(**data["params"]),  # as checked: not validated again
            edges={k: (src, port) for k, (src, port) in data["edges"].items()},
            inputs={k: Output.from_record(v) for k, v in data["inputs"].items()},
            outputs={k: Output.from_record(v) for k, v in data["outputs"].items()},
            keep=data["keep"],
        )


@dataclass
class Validation:
    """The result of validating a pipeline: nodes in run order and all problems."""

    name: str
    nodes: dict[str, Node]
    order: list[str]

    @property
    def problems(self) -> list[Problem]:
        return [p for n in self.nodes.values() for p in n.problems]

    @property
    def ok(self) -> bool:
        return not self.problems

    def upstream(self, node_id: str) -> list[str]:
        """Return the nodes whose outputs node_id reads."""
        return list(dict.fromkeys(src for src, _ in self.nodes[node_id].edges.values()))

    def to_record(self) -> dict:
        """Return the checked pipeline as JSON, as a run keeps it: what its nodes run with, not its problems."""
        if not self.ok:
            raise ValueError("a pipeline with problems is not run")
        return {
            "name": self.name,
            "order": self.order,
            "nodes": {n: self.nodes[n].to_record() for n in self.order},
        }

    @classmethod
    def from_record(cls, data: dict) -> Validation:
        """Return the checked pipeline `to_record` wrote (nothing is parsed or checked again)."""
        nodes = {node_id: Node.from_record(node_id, node) for node_id, node in data["nodes"].items()}
        return cls(data["name"], nodes, list(data["order"]))

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "ok": self.ok,
            "order": self.order,
            "nodes": [n.to_dict() for n in self.nodes.values()],
            "problems": [p.to_dict() for p in self.problems],
        }


def _split_ref(ref: str) -> tuple[str, str | None]:
    node, _, port = ref.partition(".")
    return node, port or None


def validate(spec: Spec, catalog: Catalog) -> Validation:
    """Check every node and return the schemas that flow along the edges and every problem.

    The pipeline's SQL is checked by an engine of its own, gone after: in the project's sandboxed
    worker when the catalog is the platform's (`PlatformCatalog.checks`), else in this process.
    """
    checks = catalog.checks() if hasattr(catalog, "checks") else contextlib.nullcontext()
    with checks as remote, sql.checking(remote):
        return _validate(spec, catalog)


def _validate(spec: Spec, catalog: Catalog) -> Validation:
    nodes: dict[str, Node] = {}
    for node_id, settings in spec.nodes.items():
        if not isinstance(settings, dict):
            settings = {"type": None}
        node = nodes[node_id] = Node(node_id, str(settings.get("type", "")), dict(settings))
        _parse_node(node, lambda p, m, node=node: _report(spec, node, p, m))
    for node in nodes.values():
        for parameter, (src, _) in node.edges.items():
            if src not in nodes:
                known = ", ".join(nodes)
                _report(spec, node, parameter, f'node "{src}" does not exist (nodes: {known})')
            elif src == node.id:
                _report(spec, node, parameter, "a node cannot read its own output")
    order, cyclic = _order(nodes)
    for node_id in cyclic:
        loop = " → ".join(_cycle(nodes, node_id))
        _report(spec, nodes[node_id], None, f"is in a cycle: {loop}")
    for node_id in nodes:
        if node_id not in order and node_id not in cyclic:
            _report(spec, nodes[node_id], None, "reads from a cycle, so it can never run")
    for node_id in order:
        _infer(spec, nodes[node_id], nodes, catalog)
    return Validation(spec.name, nodes, order)


def _report(spec: Spec, node: Node, parameter: str | None, message: str) -> None:
    line = spec.param_lines.get((node.id, (parameter or "").split(".")[0])) or spec.lines.get(node.id)
    node.problems.append(Problem(message, node.id, parameter, line))


def _parse_node(node: Node, report: Any) -> None:
    settings = dict(node.settings)
    kind = settings.pop("type", None)
    _check_ui(settings.pop("ui", None), report)
    keep = settings.pop("keep", False)
    if not isinstance(keep, bool):
        report("keep", "is true or false (write this node's output even when it could be fused)")
    node.keep = keep is True
    node_type = NODE_TYPES.get(kind) if isinstance(kind, str) else None
    if node_type is None:
        report("type", f"{kind!r} is not a node type (types: {', '.join(NODE_TYPES)})")
        return
    try:
        params = node_type.params.model_validate(settings)
    except ValidationError as err:
        for e in err.errors():
            where = ".".join(map(str, e["loc"])) or None
            message = "unknown parameter" if e["type"] == "extra_forbidden" else e["msg"]
            report(where, message)
        return
    node.node_type, node.params = node_type, params
    node.edges = {k: _split_ref(v) for k, v in node_type.inputs(params).items()}


def _check_ui(ui: Any, report: Any) -> None:
    """Check a node's editor position `ui: {x, y}` (kept in the file, not a parameter)."""
    if ui is None:
        return
    if not isinstance(ui, dict) or any(
        isinstance(ui.get(k), bool) or not isinstance(ui.get(k), int | float) for k in ("x", "y")
    ):
        report("ui", "is the editor's position {x: number, y: number}")


def _order(nodes: dict[str, Node]) -> tuple[list[str], list[str]]:
    """Return (topological order of the nodes not in a cycle, nodes in or after a cycle)."""
    deps = {
        n.id: {src for src, _ in n.edges.values() if src in nodes and src != n.id} for n in nodes.values()
    }
    order: list[str] = []
    done: set[str] = set()
    while True:
        ready = [n for n in nodes if n not in done and deps[n] <= done]
        if not ready:
            break
        for n in ready:
            done.add(n)
            order.append(n)
    rest = [n for n in nodes if n not in done]
    in_cycle = [n for n in rest if _cycle(nodes, n)[-1] == n]
    return order, in_cycle


def _cycle(nodes: dict[str, Node], start: str) -> list[str]:
    """Return a path start → … → start when start is on a cycle, else [start, …] ending elsewhere."""
    seen = {start}
    frontier = [(start, [start])]
    while frontier:
        current, path = frontier.pop()
        for src, _ in nodes[current].edges.values():
            if src == start:
                return [start, *reversed(path[1:]), start] if len(path) > 1 else [start, start]
            if src in nodes and src not in seen:
                seen.add(src)
                frontier.append((src, [*path, src]))
    return [start, "…"]


def _infer(spec: Spec, node: Node, nodes: dict[str, Node], catalog: Catalog) -> None:
    if node.node_type is None or node.problems:
        return
    inputs: dict[str, Output] = {}
    for parameter, (src, port) in node.edges.items():
        upstream = nodes[src]
        if upstream.outputs is None:
            return  # the upstream node's own problem says why
        if port is None:
            if len(upstream.outputs) != 1:
                ports = ", ".join(f"{src}.{p}" for p in upstream.outputs)
                _report(spec, node, parameter, f'node "{src}" has several outputs: name one ({ports})')
                return
            inputs[parameter] = next(iter(upstream.outputs.values()))
        elif port in upstream.outputs:
            inputs[parameter] = upstream.outputs[port]
        elif port == PORT and len(upstream.outputs) == 1:
            inputs[parameter] = next(iter(upstream.outputs.values()))
        else:
            _report(
                spec,
                node,
                parameter,
                f'node "{src}" has no output "{port}" (outputs: {", ".join(upstream.outputs)})',
            )
            return
    node.inputs = inputs
    node.outputs = node.node_type.check(node.params, inputs, catalog, lambda p, m: _report(spec, node, p, m))


def check(text: str, catalog: Catalog) -> dict:
    """Return validate()'s answer for a file's text, a file that is no pipeline included."""
    try:
        spec = parse(text)
    except PipelineSyntaxError as err:
        problems = [p.to_dict() for p in err.problems]
        return {"name": None, "ok": False, "order": [], "nodes": [], "problems": problems}
    return validate(spec, catalog).to_dict()


class PlatformCatalog:
    """The catalog of one project as validation sees it (lookups become LookupError)."""

    def __init__(self, platform: Any, project: str):
        self.platform = platform
        self.project = project

    def checks(self) -> Any:
        """Return the project's sandboxed worker session that checks a pipeline's SQL (a context manager)."""
        return self.platform.sandbox.session(self.project)

    def dataset(self, ref: str, part: str | None) -> tuple[str, str, pa.Schema]:
        from kpl_dataset import KPLDatasetError, list_parts
        from kpl_dataset.fs import resolve
        from kpl_dataset.manifest import load_manifest

        from ..errors import KPLError

        try:
            row = self.platform.catalog.get_dataset(self.project, ref)
        except KPLError as err:
            raise LookupError(err.message) from None
        folder = self.platform.catalog.path(row)
        parts = list_parts(folder)
        chosen = part or ("root" if "root" in parts else (parts[0] if parts else None))
        if chosen not in parts:
            raise LookupError(f"dataset {row.ref} has no part {part!r} (parts: {', '.join(parts)})")
        try:
            manifest = load_manifest(resolve(folder), chosen)
        except KPLDatasetError as err:
            raise LookupError(f"dataset {row.ref}: {err}") from None
        return row.ref, chosen, manifest.schema

    def model(self, ref: str) -> str:
        from ..errors import KPLError

        try:
            return self.platform.catalog.get_model(self.project, ref).ref
        except KPLError as err:
            raise LookupError(err.message) from None

    def algorithm(self, ref: str, function: str) -> tuple[str, list[Port], list[str]]:
        from ..errors import KPLError

        try:
            row = self.platform.catalog.get_algorithm(self.project, ref)
            spec = self.platform.catalog.read_algorithm(row).spec
        except KPLError as err:
            raise LookupError(err.message) from None
        fn = spec.functions.get(function)
        if fn is None:
            raise LookupError(
                f"algorithm {row.ref} has no {function} function (functions: {', '.join(spec.functions)})"
            )
        return row.ref, list(fn.inputs), [p.key for p in fn.outputs]
