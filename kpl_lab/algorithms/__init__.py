"""Algorithms: environment.yml and parameter.yml, packaging into versions, local environments."""

from .errors import AlgorithmError, ArchiveError, EnvironmentBuildError, ParameterError, Problem
from .package import (
    Algorithm,
    ArchiveLimits,
    content_hash,
    extract_archive,
    install_algorithm,
    read_algorithm,
)
from .parameters import Parameters, apply_overrides, load_parameters, parameter_schema, parse_parameters
from .runtime import Runtime, prepare_runtime
from .spec import FUNCTIONS, EnvironmentSpec, FunctionSpec, load_environment, parse_environment

__all__ = [
    "FUNCTIONS",
    "Algorithm",
    "AlgorithmError",
    "ArchiveError",
    "ArchiveLimits",
    "EnvironmentBuildError",
    "EnvironmentSpec",
    "FunctionSpec",
    "ParameterError",
    "Parameters",
    "Problem",
    "Runtime",
    "apply_overrides",
    "content_hash",
    "extract_archive",
    "install_algorithm",
    "load_environment",
    "load_parameters",
    "parameter_schema",
    "parse_environment",
    "parse_parameters",
    "prepare_runtime",
    "read_algorithm",
]
