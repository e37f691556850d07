"""Save a dataset, model or algorithm from a job into the project's catalog."""

from __future__ import annotations

import os

from kpl_helper import events
from kpl_helper.base import logger

MB = 1024 * 1024
ALGORITHM_SIZE_LIMIT = 50 * MB  # as the original
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".zip")


def _folder_size(path: str) -> int:
    total = 0
    for root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if d != "__pycache__"]  # the original skipped these
        for name in files:
            file = os.path.join(root, name)
            if not os.path.islink(file):
                total += os.path.getsize(file)
    return total


def check(kind: str, path: str, name: str) -> str:
    """Return the absolute path to save; raise ValueError or FileNotFoundError saying what is wrong."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"save {kind}: the name must be a non-empty string, got {name!r}")
    path = os.path.abspath(path)
    if os.path.islink(path):
        raise ValueError(f"[kpl-helper]: `{path}` is symbol link. cannot make archive")
    if not os.path.exists(path):
        raise FileNotFoundError(f"save {kind} {name!r}: {path} does not exist")
    if kind == "algorithm":
        if os.path.isdir(path):
            if not os.path.isfile(os.path.join(path, "environment.yml")):
                raise ValueError(f"save algorithm {name!r}: {path} has no environment.yml")
            size = _folder_size(path)
        elif path.endswith(ARCHIVE_SUFFIXES):
            size = os.path.getsize(path)
        else:
            raise ValueError(
                f"save algorithm {name!r}: {path} is neither a folder nor a .tar/.tar.gz/.zip archive"
            )
        if size > ALGORITHM_SIZE_LIMIT:
            raise ValueError(
                f"save algorithm {name!r}: {path} is {size / MB:.1f} MB, over the limit of 50 MB"
            )
    return path


def save(kind: str, path: str, name: str, description: str | None, as_serialized: bool = False) -> bool:
    """Check and send a `save` event; return False (and log) outside the platform."""
    path = check(kind, path, name)
    writer = events.get_writer()
    if writer is None:
        logger.info("[kpl-helper]: not in a platform job: %s %r at %s is not saved", kind, name, path)
        return False
    events.emit(
        "save",
        kind=kind,
        path=path,
        name=name,
        description=description or "",
        as_serialized=bool(as_serialized),
    )
    logger.info("[kpl-helper]: asked the platform to save %s %r from %s", kind, name, path)
    return True


def _save_logged(
    kind: str, path: str, name: str, description: str | None, as_serialized: bool = False
) -> None:
    # The original logged failures instead of raising, so training never dies at the last step.
    try:
        save(kind, path, name, description, as_serialized)
    except Exception as error:
        logger.error("[kpl-helper]: %s", error)


def save_dataset(path: str, name: str, description: str | None, as_serialized: bool = False) -> None:
    """Save a dataset folder (kpl-dataset format when as_serialized) or archive."""
    _save_logged("dataset", path, name, description, as_serialized)


def save_model(path: str, name: str, description: str | None) -> None:
    """Save a model folder or file."""
    _save_logged("model", path, name, description)


def save_algorithm(path: str, name: str, description: str | None) -> None:
    """Save an algorithm folder (with environment.yml, at most 50 MB) or archive."""
    _save_logged("algorithm", path, name, description)
