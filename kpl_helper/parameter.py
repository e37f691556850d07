"""The algorithm's parameters: from the job (KPL_ENV_PARAMETER) or the local parameter.yml."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Mapping

import yaml

from kpl_helper.base import get_config, logger


class MissingParameterError(KeyError, AttributeError):
    """Raise for a parameter that is not there: KeyError as in the original, AttributeError so hasattr works."""

    __str__ = Exception.__str__  # KeyError would show the message in quotes


class DotDict(dict):
    """A dict whose keys are also attributes (`p.KEY1.KEY2`), nested dicts and lists included."""

    def __init__(self, dct: Mapping | None = None):
        super().__init__()
        if dct:
            self.update(dct)

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError:
            raise MissingParameterError(f"parameter has no key {name!r}") from None

    def __setattr__(self, name: str, value) -> None:
        self[name] = value

    def __delattr__(self, name: str) -> None:
        try:
            del self[name]
        except KeyError:
            raise MissingParameterError(f"parameter has no key {name!r}") from None

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, _wrap(value))

    def update(self, *args, **kwargs) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def setdefault(self, key, default=None):
        if key not in self:
            self[key] = default
        return self[key]


def _wrap(value):
    if isinstance(value, DotDict):
        return value
    if isinstance(value, Mapping):
        return DotDict(value)
    if isinstance(value, list):
        return [_wrap(item) for item in value]
    return value


_cache: dict[tuple[str, str], DotDict] = {}


def get_parameter(default: str | None = None) -> DotDict:
    """Return the parameters: the job's inside the platform, else those in the `default` YAML file."""
    config = get_config()
    if not config.uses_defaults:
        if config.parameter:
            return _cached(("env", config.parameter), lambda: _from_json(config.parameter))
        if config.parameter_file:
            path = os.path.abspath(config.parameter_file)
            return _cached(("file", path), lambda: _from_yaml(path))
        logger.warning("[kpl-helper]: the job has no KPL_ENV_PARAMETER; using the default parameter file")
    if default:
        path = os.path.abspath(default)
        return _cached(("file", path), lambda: _from_yaml(path))
    raise LookupError("Not found parameter: no job parameters and no default parameter.yml given")


def _cached(key: tuple[str, str], load) -> DotDict:
    # The original returned the same object each time: edits made through it stay visible.
    if key not in _cache:
        _cache[key] = load()
    return _cache[key]


def _from_json(text: str) -> DotDict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"KPL_ENV_PARAMETER is not valid JSON: {error.msg} at line {error.lineno} column {error.colno}"
        ) from None
    if not isinstance(value, dict):
        raise ValueError(f"KPL_ENV_PARAMETER must be a JSON object, got {type(value).__name__}")
    return DotDict(value)


def _from_yaml(path: str) -> DotDict:
    try:
        with open(path, encoding="utf-8") as file:
            value = yaml.safe_load(file)
    except FileNotFoundError:
        raise FileNotFoundError(f"parameter file not found: {path}") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or str(error)
        raise ValueError(f"{path}:{where} invalid YAML: {problem}") from None
    if value is None:
        return DotDict()
    if not isinstance(value, dict):
        raise ValueError(
            f"{path}: parameters must be a mapping of names to values, got {type(value).__name__}"
        )
    return DotDict(value)


def write_parameter() -> None:
    """Write the job's parameters to the YAML file named by `sys.argv` (`helper write <yml>`), as the original.

    Like the original it logs, rather than raises, when the parameters cannot be written.
    """
    argv = sys.argv
    if len(argv) > 2 and argv[1] == "write":
        path = argv[2]
    else:
        logger.error("Write Failed !!!\nUsage `helper write <yml file>` to write parameters to yml")
        sys.exit(1)
    try:
        write_parameter_file(path)
    except (OSError, ValueError, LookupError) as error:
        logger.error("Could get parameters. {}".format(error))  # noqa: UP032 original text


def write_parameter_file(path: str) -> None:
    """Write the job's parameters as YAML to `path` (atomically); `{}` outside the platform."""
    config = get_config()
    if not config.inner:
        parameters = {}  # the original wrote "{}" outside the platform
    elif config.parameter:
        parameters = dict(_from_json(config.parameter))
    elif config.parameter_file:
        parameters = dict(_from_yaml(os.path.abspath(config.parameter_file)))
    else:
        raise LookupError(
            "cannot write parameters: the job has neither KPL_ENV_PARAMETER nor KPL_PARAMETER_FILE"
        )
    _write_yaml_atomically(os.path.abspath(path), _plain(parameters))


def _plain(value):
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def _write_yaml_atomically(path: str, data: dict) -> None:
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=folder, prefix=".parameter-", suffix=".yml")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            yaml.safe_dump(data, file, sort_keys=False, allow_unicode=True)
        os.replace(temp, path)
    except BaseException:
        os.unlink(temp)
        raise
