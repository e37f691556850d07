"""Read `parameter.yml`, describe it as a JSON Schema form, and apply overrides."""

from __future__ import annotations

import copy
import datetime
import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..documents import load_yaml, node_value
from .errors import ParameterError, Problem
from .spec import compose_yaml, node_line, shown

PARAMETER_FILE = "parameter.yml"
JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


@dataclass(frozen=True)
class Parameters:
    """The defaults of parameter.yml and the comments that describe them (by dotted path)."""

    values: dict[str, Any] = field(default_factory=dict)
    descriptions: dict[str, str] = field(default_factory=dict)

    def schema(self) -> dict:
        """Return a JSON Schema of the parameters that a UI can render as a form."""
        return parameter_schema(self.values, self.descriptions)

    def apply(self, overrides: Mapping[str, Any] | Iterable[str] | None) -> dict[str, Any]:
        """Return the defaults with `overrides` applied and type-checked."""
        return apply_overrides(self.values, overrides)


def load_parameters(path: str | Path) -> Parameters:
    """Read a parameter.yml file."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ParameterError(Problem("", f"cannot read the file: {exc.strerror}", path.name)) from exc
    return parse_parameters(data, file=path.name)


def parse_parameters(text: str | bytes, file: str = PARAMETER_FILE) -> Parameters:
    """Parse parameter.yml text: any YAML mapping with text keys (an empty file means no parameters)."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise ParameterError(Problem("", f"not UTF-8 text (byte {exc.start})", file)) from exc
    root = compose_yaml(text, file, ParameterError)
    if root is None:
        return Parameters()
    if not isinstance(root, yaml.MappingNode):
        raise ParameterError(
            Problem(
                "", f"expected a mapping of parameter names to values, got {shown(node_value(root))}", file, 1
            )
        )
    problems: list[Problem] = []
    lines = text.splitlines()
    descriptions: dict[str, str] = {}
    values = _mapping_values(root, "", file, lines, problems, descriptions)
    if problems:
        raise ParameterError(problems)
    return Parameters(values=values, descriptions=descriptions)


def _mapping_values(
    node: yaml.MappingNode,
    prefix: str,
    file: str,
    lines: list[str],
    problems: list[Problem],
    descriptions: dict[str, str],
) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key_node, value_node in node.value:
        key = node_value(key_node)
        path = f"{prefix}{key}"
        if not isinstance(key, str):
            problems.append(Problem(path, "parameter names must be text", file, node_line(key_node)))
            continue
        if key in values:
            problems.append(Problem(path, "duplicate parameter", file, node_line(key_node)))
            continue
        description = _comment_for(key_node, value_node, lines)
        if description:
            descriptions[path] = description
        if isinstance(value_node, yaml.MappingNode):
            values[key] = _mapping_values(value_node, f"{path}.", file, lines, problems, descriptions)
        else:
            values[key] = _json_value(node_value(value_node))
    return values


def _comment_for(key_node: yaml.Node, value_node: yaml.Node, lines: list[str]) -> str:
    """Return the comment after the value on its line, else the comment lines just above the key."""
    if isinstance(value_node, yaml.ScalarNode):
        end = value_node.end_mark
        rest = lines[end.line][end.column :].strip() if end.line < len(lines) else ""
        if rest.startswith("#"):
            return rest.lstrip("#").strip()
    above = []
    line = key_node.start_mark.line - 1
    while line >= 0 and lines[line].strip().startswith("#"):
        above.append(lines[line].strip().lstrip("#").strip())
        line -= 1
    return " ".join(reversed(above))


def _json_value(value: Any) -> Any:
    """Make YAML-only values (dates) JSON-friendly: parameters travel as JSON to the job."""
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, list):
        return [_json_value(item) for item in value]
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    return value


def parameter_schema(defaults: Mapping[str, Any], descriptions: Mapping[str, str] | None = None) -> dict:
    """Derive a JSON Schema from the default values (types, nesting, arrays)."""
    schema = _object_schema(defaults, "", descriptions or {})
    schema["$schema"] = JSON_SCHEMA_DIALECT
    schema["title"] = "parameters"
    return schema


def _object_schema(values: Mapping[str, Any], prefix: str, descriptions: Mapping[str, str]) -> dict:
    properties = {}
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            child = _object_schema(value, f"{path}.", descriptions)
        else:
            child = _value_schema(value)
            child["default"] = copy.deepcopy(value)
        child["title"] = key
        if path in descriptions:
            child["description"] = descriptions[path]
        properties[key] = child
    return {"type": "object", "properties": properties, "additionalProperties": False}


def _value_schema(value: Any) -> dict:
    kind = _kind(value)
    if kind == "object":
        return _object_schema(value, "", {})
    if kind == "array":
        schema: dict[str, Any] = {"type": "array"}
        kinds = {_kind(item) for item in value}
        if len(kinds) == 1 and kinds != {"null"}:
            schema["items"] = _value_schema(value[0])
        elif kinds == {"integer", "number"}:
            schema["items"] = {"type": "number"}
        return schema
    if kind == "null":
        return {}
    return {"type": kind}


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, (list, tuple)):
        return "array"
    return type(value).__name__


_NOUNS = {"boolean": "true/false values", "integer": "integers", "number": "numbers", "string": "texts"}
_EXPECTED = {
    "boolean": "expected true or false",
    "integer": "expected an integer",
    "number": "expected a number",
    "string": "expected text",
    "array": "expected a list (YAML, e.g. [1, 2])",
    "object": "expected a mapping (YAML, e.g. {a: 1})",
}


def _expected(default: Any) -> str:
    kind = _kind(default)
    if kind == "array" and default and len({_kind(item) for item in default}) == 1:
        noun = _NOUNS.get(_kind(default[0]))
        if noun:
            return f"expected a list of {noun} (YAML, e.g. {shown(default)})"
    return _EXPECTED.get(kind, "invalid value")


def parse_override(text: str) -> tuple[str, str]:
    """Split `name.sub=value` into the dotted name and the raw value text."""
    name, sep, raw = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise ParameterError(Problem(text, "expected NAME=VALUE (e.g. lr=0.01, model.depth=18)"))
    return name, raw


def apply_overrides(defaults: Mapping[str, Any], overrides: Mapping[str, Any] | Iterable[str] | None) -> dict:
    """Return a copy of `defaults` with overrides applied; raise ParameterError naming every bad key.

    Overrides are `NAME=VALUE` strings (VALUE read as YAML unless the default is text) or a
    mapping of names (dotted or nested) to typed values.
    """
    result = copy.deepcopy(dict(defaults))
    problems: list[Problem] = []
    if overrides is None:
        return result
    if isinstance(overrides, Mapping):
        items = [(str(name), value, False) for name, value in overrides.items()]
    else:
        items = []
        for text in overrides:
            try:
                name, raw = parse_override(text)
            except ParameterError as exc:
                problems.extend(exc.problems)
                continue
            items.append((name, raw, True))
    for name, value, from_text in items:
        _set(result, defaults, name, value, from_text, problems)
    if problems:
        raise ParameterError(problems)
    return result


def _set(
    target: dict, defaults: Mapping[str, Any], name: str, value: Any, from_text: bool, problems: list[Problem]
) -> None:
    parts = [name] if name in defaults else name.split(".")
    node_target, node_defaults = target, defaults
    for depth, part in enumerate(parts):
        path = ".".join(parts[: depth + 1])
        if not isinstance(node_defaults, Mapping) or part not in node_defaults:
            siblings = [str(key) for key in node_defaults] if isinstance(node_defaults, Mapping) else []
            close = difflib.get_close_matches(part, siblings, n=1, cutoff=0.6)
            prefix = ".".join(parts[:depth] + close[:1])
            hint = f'; did you mean "{prefix}"?' if close else ""
            problems.append(Problem(path, f"unknown parameter{hint}"))
            return
        if depth < len(parts) - 1:
            if not isinstance(node_defaults[part], Mapping):
                problems.append(
                    Problem(
                        name, f"unknown parameter ({path} is {_kind(node_defaults[part])}, not a mapping)"
                    )
                )
                return
            node_target, node_defaults = node_target[part], node_defaults[part]
    default = node_defaults[parts[-1]]
    path = ".".join(parts)
    if from_text:
        raw = value
        if isinstance(default, str):
            node_target[parts[-1]] = raw
            return
        try:
            value = load_yaml(raw) if raw.strip() else None
        except yaml.YAMLError:
            problems.append(Problem(path, f"{_expected(default)}, got {shown(raw)}"))
            return
        shown_value = shown(raw)
    else:
        shown_value = shown(value)
    if isinstance(default, Mapping) and isinstance(value, Mapping):
        for key, item in value.items():
            _set(target, defaults, f"{path}.{key}", item, False, problems)
        return
    coerced, ok = _coerce(default, _json_value(value))
    if not ok:
        problems.append(Problem(path, f"{_expected(default)}, got {shown_value}"))
        return
    node_target[parts[-1]] = coerced


def _coerce(default: Any, value: Any) -> tuple[Any, bool]:
    """Check `value` against the type of `default`; ints become floats where a float is expected."""
    kind = _kind(default)
    if kind == "null":
        return value, True
    if kind == "number":
        if _kind(value) in ("integer", "number"):
            return float(value), True
        return value, False
    if kind == "array":
        if not isinstance(value, list):
            return value, False
        kinds = {_kind(item) for item in default}
        if len(kinds) == 1 and kinds != {"null"} and default:
            items = [_coerce(default[0], item) for item in value]
            if not all(ok for _, ok in items):
                return value, False
            return [item for item, _ in items], True
        return value, True
    if kind == "object":
        return value, False  # a mapping is merged by _set; anything else is wrong
    return value, _kind(value) == kind
