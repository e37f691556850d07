"""Pipelines: YAML files of dataset, processor and algorithm nodes; validated, run and cached.

The package's names are the file model (`format`: read and write a file, `builder`: the fluent
`Pipeline(...)` API), so a kernel may build files without the engine; each loads on first use,
so a sandboxed worker importing `pipelines.sql` loads no YAML or pydantic. Validation
(`pipelines.validate`), the processors, the SQL engine and the runner are its submodules:
they load DuckDB and pyarrow.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .builder import Pipeline, Step
    from .format import SUFFIX, Problem, Spec, load, parse

__all__ = ["SUFFIX", "Pipeline", "Problem", "Spec", "Step", "load", "parse"]
_HOMES = {"Pipeline": "builder", "Step": "builder"} | dict.fromkeys(
    ["SUFFIX", "Problem", "Spec", "load", "parse"], "format"
)


def __getattr__(name: str) -> Any:
    """Return one of the file model's names, importing its module now."""
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
