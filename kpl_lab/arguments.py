"""The shorthands typed on a command line, read alike by `kpl-lab` and the %kpl_* magics.

`KEY=REF` inputs, `NAME=SPEC` search spaces, YAML values. A refusal is a `BadRequest`
naming the field. Imports the standard library, PyYAML and the errors only: the kernel
side imports it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from .documents import load_yaml
from .errors import BadRequest


def read_yaml(text: str, what: str, field: str) -> Any:
    """Return a YAML value the user typed or named, read within bounds; refuse it naming `what`."""
    try:
        return load_yaml(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise BadRequest(f"{what}: {getattr(error, 'problem', None) or error}{where}", field=field) from None


def parse_inputs(texts: Sequence[str]) -> dict[str, str]:
    """Return input key -> reference from `KEY=REF` texts."""
    inputs = {}
    for text in texts:
        key, sep, ref = text.partition("=")
        if not (sep and key and ref):
            raise BadRequest(
                f"--input {text!r}: expected KEY=REF (e.g. data=digits or data=dataset:digits:1)",
                field="inputs",
            )
        inputs[key] = ref
    return inputs


def parse_space(text: str) -> tuple[str, dict]:
    """Read `NAME=float:LOW:HIGH[:log]`, `NAME=int:LOW:HIGH[:log|:STEP]` or `NAME=categorical:A,B,...`."""
    name, sep, spec = text.partition("=")
    kind, _, rest = spec.partition(":")
    if not sep or not name or kind not in ("float", "int", "categorical") or not rest:
        raise BadRequest(
            f"--space {text!r}: expected NAME=float:LOW:HIGH[:log], NAME=int:LOW:HIGH[:log|:STEP] "
            "or NAME=categorical:A,B,...",
            field=f"space.{name or '?'}",
        )
    if kind == "categorical":
        choices = [read_yaml(choice, f"--space {text!r}", f"space.{name}") for choice in rest.split(",")]
        return name, {"type": kind, "choices": choices}
    low, _, tail = rest.partition(":")
    high, _, option = tail.partition(":")
    number = int if kind == "int" else float  # YAML reads 1e-4 as text
    try:
        entry = {"type": kind, "low": number(low), "high": number(high)}
        if option == "log":
            entry["log"] = True
        elif option:
            entry["step"] = number(option)
    except ValueError:
        raise BadRequest(
            f"--space {text!r}: LOW, HIGH and STEP must be {kind} numbers", field=f"space.{name}"
        ) from None
    return name, entry
