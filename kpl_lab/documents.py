"""User documents (YAML files, JSON bodies) read within bounds: no aliases, capped nesting and size.

A member's pipeline file, environment.yml or parameter.yml is read by the platform's own
process, so a few hundred bytes must not cost it gigabytes or a RecursionError:

- YAML anchors and aliases (`&x`, `*x`, `<<: *x`) are refused: a "billion laughs" file expands
  a few aliases into millions of values. Write the value out in full instead.
- Lists and mappings nest at most `MAX_DEPTH` levels, in YAML and in JSON.
- A YAML document is at most `MAX_YAML_CHARS` characters: PyYAML reads some 130 KB a second, and
  the shipped files are under 2 KB.
- A value PyYAML cannot build (`2024-13-01`, an integer of 5,000 digits) is refused where it is.

Every refusal is a `DocumentError`: a `yaml.MarkedYAMLError` (its `problem_mark` is the line and
column) and a `ValueError`, so the `except yaml.YAMLError` and `except ValueError` that
callers already have report it as the user's mistake.
"""

from __future__ import annotations

import json
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent, MappingStartEvent, SequenceStartEvent

MAX_DEPTH = 64
MAX_YAML_CHARS = 128 * 1024


class DocumentError(yaml.MarkedYAMLError, ValueError):
    """A user document goes past a limit, or holds a value that cannot be read; says where in YAML."""

    def __init__(self, problem: str, mark: Any = None) -> None:  # a yaml Mark, of the C or Python loader
        super().__init__(problem=problem, problem_mark=mark)


class SafeLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses anchors and aliases and nesting deeper than MAX_DEPTH."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self.depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event = self.peek_event()
        if isinstance(event, AliasEvent):
            raise DocumentError(
                f"alias *{event.anchor}: anchors and aliases are not accepted; write the value out",
                event.start_mark,
            )
        if event.anchor is not None:
            raise DocumentError(
                f"anchor &{event.anchor}: anchors and aliases are not accepted; write the value out",
                event.start_mark,
            )
        if not isinstance(event, (MappingStartEvent, SequenceStartEvent)):
            return super().compose_node(parent, index)
        if self.depth >= MAX_DEPTH:
            raise DocumentError(f"lists and mappings nest deeper than {MAX_DEPTH} levels", event.start_mark)
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


class _Constructor(SafeConstructor):
    """Build safe Python values; a value that cannot be built is a DocumentError at its node."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except DocumentError:
            raise
        except (ValueError, OverflowError) as error:  # a 13th month, an int past Python's 4,300 digits
            text = node.value if isinstance(node, yaml.ScalarNode) else ""
            shown = f" {text[:40]!r}{'…' if len(text) > 40 else ''}" if text else ""
            raise DocumentError(f"cannot read the value{shown}: {error}", node.start_mark) from None


def compose_yaml(text: str, loader: type[SafeLoader] = SafeLoader) -> yaml.Node | None:
    """Return a YAML document's root node (None when empty), each of its values checked to build."""
    if len(text) > MAX_YAML_CHARS:
        raise DocumentError(f"the document has {len(text):,} characters; at most {MAX_YAML_CHARS:,} are read")
    reader = loader(text)
    try:
        root = reader.get_single_node()
    finally:
        reader.dispose()
    if root is not None:
        node_value(root)
    return root


def node_value(node: yaml.Node) -> Any:
    """Return the Python value of a node (safe types only)."""
    return _Constructor().construct_object(node, deep=True)  # a new one: it remembers every node it built


def load_yaml(text: str, loader: type[SafeLoader] = SafeLoader) -> Any:
    """Return the Python value of a YAML document (None when empty)."""
    root = compose_yaml(text, loader)
    return None if root is None else node_value(root)


def load_json(data: str | bytes, **options: Any) -> Any:
    """Return the value of a JSON document (`options` as json.loads takes them), nesting at most MAX_DEPTH."""
    try:
        value = json.loads(data, **options)
    except RecursionError:  # json's C parser stops near Python's recursion limit (1,000)
        raise DocumentError(f"JSON lists and objects nest deeper than {MAX_DEPTH} levels") from None
    if depth(value) > MAX_DEPTH:
        raise DocumentError(f"JSON lists and objects nest deeper than {MAX_DEPTH} levels")
    return value


def depth(value: Any) -> int:
    """Return how many lists and mappings nest in a value (0 for a scalar), without recursing."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, level)
        if level > MAX_DEPTH:
            break  # deep enough to refuse: the rest need not be walked
        stack.extend((child, level + 1) for child in children if isinstance(child, (dict, list)))
    return deepest
