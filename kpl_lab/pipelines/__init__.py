"""Pipelines: YAML files of dataset, processor and algorithm nodes; validated, run and cached.

Importing the package loads the file model only (`format`: read and write a file, `builder`:
the fluent `Pipeline(...)` API), so a kernel may build files without the engine. Validation
(`pipelines.validate`), the processors, the SQL engine and the runner are its submodules:
they load DuckDB and pyarrow.
"""

from .builder import Pipeline, Step
from .format import SUFFIX, Problem, Spec, load, parse

__all__ = ["SUFFIX", "Pipeline", "Problem", "Spec", "Step", "load", "parse"]
