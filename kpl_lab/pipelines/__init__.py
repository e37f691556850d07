"""Pipelines: YAML files of dataset, processor and algorithm nodes; validated, run and cached."""

from .builder import Pipeline, Step
from .format import SUFFIX, Problem, Spec, load, parse
from .validate import PlatformCatalog, Validation, validate

__all__ = [
    "SUFFIX",
    "Pipeline",
    "PlatformCatalog",
    "Problem",
    "Spec",
    "Step",
    "Validation",
    "load",
    "parse",
    "validate",
]
