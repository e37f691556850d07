"""Pipelines: YAML files of dataset, processor and algorithm nodes; validated, run and cached."""

from .format import SUFFIX, Problem, Spec, load, parse
from .validate import PlatformCatalog, Validation, validate

__all__ = ["SUFFIX", "PlatformCatalog", "Problem", "Spec", "Validation", "load", "parse", "validate"]
