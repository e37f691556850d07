"""PipelineBuilder: build a pipeline file in a notebook, node by node, validated by the server as it grows.

The node types, their parameters' JSON schemas and which parameters name inputs come from
the server (`GET /kpl/api/pipelines/node-types`), as in the pipeline editor; the kernel
loads the pipeline file model only, never the engine that checks and runs it.
"""

from __future__ import annotations

import json
import time
from html import escape
from pathlib import Path
from typing import Any

import ipywidgets as widgets
import yaml

from ...pipelines import Pipeline
from ...pipelines.format import load_yaml
from ..client import Client


def schema_problems(schema: dict, params: dict) -> list[str]:
    """Return what in `params` does not fit a node type's parameter schema, each as `parameter: message`."""
    import fastjsonschema  # jsonschema takes seconds to import; this, milliseconds

    properties = schema.get("properties", {})
    problems = [f"{name}: Field required" for name in schema.get("required", []) if name not in params]
    if schema.get("additionalProperties") is False:
        problems += [f"{name}: unknown parameter" for name in params if name not in properties]
    if not problems:  # then the first value that does not fit (defaults are left out, not filled in)
        try:
            fastjsonschema.compile(schema, use_default=False)(params)
        except fastjsonschema.JsonSchemaValueException as error:
            where = ".".join(error.path[1:]) or "parameters"
            problems.append(f"{where}: {error.message.removeprefix(error.name).strip()}")
    return problems


def _cell(value: Any) -> str:
    if isinstance(value, dict) and set(value) == {"$bytes"}:
        return f"<{value['$bytes']} bytes>"
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:59] + "…"


class PipelineBuilder(widgets.VBox):
    """Add nodes (type, id, inputs picked from the nodes so far, parameters from the type's schema),
    see each node's output fields and every problem, and save the same YAML file the CLI runs."""

    def __init__(
        self, name: str = "pipeline", path: str | Path | None = None, client: Client | None = None, **kwargs
    ):
        self.client = client or Client()
        self.node_types = {t["name"]: t for t in self.client.pipeline_node_types()}
        self.path = Path(path) if path else None
        self.pipeline = Pipeline.load(self.path) if self.path and self.path.exists() else Pipeline(name)
        self.validation: dict | None = None
        self.type_picker = widgets.Dropdown(
            options=list(self.node_types), value="dataset", description="type"
        )
        self.id_text = widgets.Text(description="id", placeholder="default: from the type")
        self.fields: dict[str, widgets.Widget] = {}
        self.form = widgets.VBox()
        self.add_button = widgets.Button(description="add node", button_style="primary")
        self.remove_picker = widgets.Dropdown(description="node", options=[])
        self.remove_button = widgets.Button(description="remove node")
        self.preview_button = widgets.Button(description="preview")
        self.preview_view = widgets.HTML()
        self.save_button = widgets.Button(description="save")
        self.message = widgets.HTML()
        self.nodes_view = widgets.HTML()
        self.yaml_view = widgets.Textarea(disabled=True, layout=widgets.Layout(width="100%", height="200px"))
        self.type_picker.observe(lambda _: self._build_form(), names="value")
        self.add_button.on_click(lambda _: self._add_from_form())
        self.remove_button.on_click(
            lambda _: self.remove_node(self.remove_picker.value) if self.remove_picker.value else None
        )
        self.save_button.on_click(lambda _: self.save())
        self.preview_button.on_click(
            lambda _: self.preview(self.remove_picker.value) if self.remove_picker.value else None
        )
        editor = widgets.VBox([widgets.HBox([self.type_picker, self.id_text]), self.form, self.add_button])
        tools = widgets.HBox([self.remove_picker, self.remove_button, self.preview_button, self.save_button])
        super().__init__(
            [editor, self.message, self.nodes_view, tools, self.preview_view, self.yaml_view], **kwargs
        )
        self._build_form()
        self.refresh()

    # the state

    @property
    def text(self) -> str:
        """Return the pipeline file's YAML."""
        return self.pipeline.to_yaml()

    def refs(self) -> list[str]:
        """Return what an input may name: every node, and each named port of a node with several."""
        out = []
        outputs = {n["id"]: n["outputs"] for n in (self.validation or {}).get("nodes", [])}
        for node_id in self.pipeline.nodes:
            ports = list(outputs.get(node_id) or {})
            out += [f"{node_id}.{p}" for p in ports] if len(ports) > 1 else [node_id]
        return out

    def add_node(self, type_name: str, id: str | None = None, **params: Any) -> str:
        """Add a node after checking its parameters against its type's schema; return its id."""
        node_type = self.node_types.get(type_name)
        if node_type is None:
            raise ValueError(f"{type_name!r} is not a node type (types: {', '.join(self.node_types)})")
        problems = schema_problems(node_type["parameters"], params)
        if problems:
            raise ValueError("; ".join(problems))
        step = self.pipeline.add(type_name, id or None, **params)
        self.refresh()
        return step.id

    def remove_node(self, node_id: str) -> None:
        """Remove a node (what read it shows a dangling input until changed)."""
        del self.pipeline.nodes[node_id]
        self.refresh()

    def upstream(self, node_id: str) -> list[str]:
        """Return node_id and every node it reads from, directly or not, in file order."""
        wanted, todo = set(), [node_id]
        while todo:
            current = todo.pop()
            if current in wanted or current not in self.pipeline.nodes:
                continue
            wanted.add(current)
            todo += [ref.partition(".")[0] for ref in self._reads(self.pipeline.nodes[current])]
        return [n for n in self.pipeline.nodes if n in wanted]

    def preview(self, node_id: str, port: str | None = None, limit: int = 5, timeout: float = 300) -> dict:
        """Run node_id and what it reads on the server (cached nodes are reused); show its first records."""
        part = Pipeline(self.pipeline.name, self.pipeline.description)
        part.nodes = {n: self.pipeline.nodes[n] for n in self.upstream(node_id)}
        run = self.client.run_pipeline(part.to_yaml())
        deadline = time.monotonic() + timeout
        while run["state"] == "running" and time.monotonic() < deadline:
            time.sleep(0.2)
            run = self.client.pipeline_run(run["id"])
        if run["state"] != "succeeded":
            failed = [
                f"{n['node']}: {n['log'].strip().splitlines()[-1]}"
                for n in run["nodes"]
                if n["state"] == "failed" and n["log"].strip()
            ]
            self.preview_view.value = f"<span style='color:#c00'>preview run {escape(run['id'])} {escape(run['state'])}: {escape('; '.join(failed))}</span>"
            return {}
        shown = self.client.pipeline_records(run["id"], node_id, port, limit)
        names = [f["name"] for f in shown["fields"]]
        head = "".join(f"<th>{escape(n)}</th>" for n in names)
        body = "".join(
            "<tr>" + "".join(f"<td>{escape(_cell(r.get(n)))}</td>" for n in names) + "</tr>"
            for r in shown["records"]
        )
        self.preview_view.value = (
            f"<b>{escape(node_id)}.{escape(shown['port'])}</b>: first {len(shown['records'])} of {shown['total']} records"
            f"<table><tr>{head}</tr>{body}</table>"
        )
        return shown

    def save(self, path: str | Path | None = None) -> Path:
        """Write the pipeline file (to the path it was opened from unless given)."""
        path = Path(path) if path else self.path
        if path is None:
            path = Path(f"{self.pipeline.name}.kpl-pipeline.yaml")
        self.path = self.pipeline.write(path)
        self.message.value = f"saved {escape(str(self.path))}"
        return self.path

    def refresh(self) -> None:
        """Validate on the server and redraw the nodes, the problems and the YAML."""
        if self.pipeline.nodes:
            self.validation = self.client.validate_pipeline(self.text)
        else:
            self.validation = None
        self.yaml_view.value = self.text
        self.remove_picker.options = list(self.pipeline.nodes)
        self._draw_nodes()
        self._build_form()

    # the widgets

    def _draw_nodes(self) -> None:
        checked = {n["id"]: n for n in (self.validation or {}).get("nodes", [])}
        rows = []
        for node_id, settings in self.pipeline.nodes.items():
            node = checked.get(node_id, {})
            outputs = "; ".join(
                f"{port}: "
                + (", ".join(f["name"] for f in out["fields"]) if out["fields"] is not None else out["kind"])
                for port, out in (node.get("outputs") or {}).items()
            )
            problems = "<br>".join(
                escape(f"{p['parameter'] + ': ' if p['parameter'] else ''}{p['message']}")
                for p in node.get("problems", [])
            )
            rows.append(
                f"<tr><td>{escape(node_id)}</td><td>{escape(settings['type'])}</td>"
                f"<td>{escape(outputs)}</td><td style='color:#c00'>{problems}</td></tr>"
            )
        head = "<tr><th>node</th><th>type</th><th>output fields</th><th>problems</th></tr>"
        state = ""
        if self.validation is not None:
            state = "valid" if self.validation["ok"] else f"{len(self.validation['problems'])} problem(s)"
        self.nodes_view.value = (
            f"<b>{escape(self.pipeline.name)}</b> {state}<table>{head}{''.join(rows)}</table>"
        )

    def _reads(self, settings: dict) -> list[str]:
        """Return the `node` or `node.port` references a node's settings read, as its type names them."""
        node_type = self.node_types.get(str(settings.get("type")), {"inputs": [], "named_inputs": False})
        refs = [settings.get(name) for name in node_type["inputs"]]
        if node_type["named_inputs"] and isinstance(settings.get("inputs"), dict):
            refs += list(settings["inputs"].values())
        return [ref for ref in refs if isinstance(ref, str)]

    def _build_form(self) -> None:
        node_type = self.node_types[self.type_picker.value]
        schema = node_type["parameters"]
        refs = self.refs()
        self.fields = {}
        for name, spec in schema.get("properties", {}).items():
            if name in node_type["inputs"]:
                box = widgets.Dropdown(options=refs, value=refs[-1] if refs else None, description=name)
            elif spec.get("type") == "boolean":
                box = widgets.Checkbox(value=spec.get("default", False), description=name)
            else:
                required = name in schema.get("required", [])
                box = widgets.Text(
                    description=name,
                    placeholder=("required; " if required else "optional; ")
                    + (spec.get("description") or "YAML value"),
                    layout=widgets.Layout(width="80%"),
                )
            self.fields[name] = box
        self.form.children = list(self.fields.values())

    def _add_from_form(self) -> None:
        params = {}
        properties = self.node_types[self.type_picker.value]["parameters"].get("properties", {})
        for name, box in self.fields.items():
            if isinstance(box, widgets.Dropdown):
                if box.value:
                    params[name] = box.value
            elif isinstance(box, widgets.Checkbox):
                if box.value != properties[name].get("default", False):
                    params[name] = box.value
            elif box.value.strip():
                try:
                    params[name] = load_yaml(box.value)  # `[object]`, `{content: mask}`, `0.8`
                except yaml.YAMLError as err:
                    self.message.value = f"<span style='color:#c00'>{escape(name)}: not a YAML value ({escape(str(err))})</span>"
                    return
        try:
            node_id = self.add_node(self.type_picker.value, self.id_text.value.strip() or None, **params)
        except ValueError as err:
            self.message.value = f"<span style='color:#c00'>{escape(str(err))}</span>"
            return
        self.message.value = f"added {escape(node_id)}"
        self.id_text.value = ""
