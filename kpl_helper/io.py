"""Where the job reads its inputs and writes its outputs."""

from __future__ import annotations

import os

from kpl_helper.base import get_config


def _check_key(key) -> str:
    name = str(key)
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        raise ValueError(f"invalid input/output key {name!r}: use the key from environment.yml")
    return name


def get_input_path(key, default: str = "") -> str:
    """Return the folder of input `key` (a dataset or model); `default` outside the platform."""
    config = get_config()
    if config.uses_defaults:
        return default
    name = _check_key(key)
    if not config.input_root:
        raise FileNotFoundError(f"input {name!r}: the job has no KPL_ENV_INPUT_ROOT_PATH")
    path = os.path.join(config.input_root, name)
    if not os.path.exists(path):
        available = sorted(os.listdir(config.input_root)) if os.path.isdir(config.input_root) else []
        raise FileNotFoundError(
            f"input {name!r} not found: {path} does not exist (the job's inputs: {', '.join(available) or 'none'})"
        )
    return path


def get_output_path(key, default: str = "") -> str:
    """Return the folder for output `key`, created if needed; `default` outside the platform."""
    config = get_config()
    if config.uses_defaults:
        return default
    name = _check_key(key)
    if not config.output_root:
        raise FileNotFoundError(f"output {name!r}: the job has no KPL_ENV_OUTPUT_ROOT_PATH")
    path = os.path.join(config.output_root, name)
    os.makedirs(path, exist_ok=True)
    return path
