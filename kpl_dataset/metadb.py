"""MetaDB: a small key/value store per dataset part, kept as one JSON file written atomically."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pyarrow as pa

from kpl_dataset.errors import (
    DatasetKeyError,
    DatasetTypeError,
    DatasetValueError,
    DefinitionError,
    KPLDatasetError,
)
from kpl_dataset.fs import Location, resolve
from kpl_dataset.names import check_part_name, meta_name

_LEGACY_SUFFIX = ".prop"


def _check_value(value: Any, where: str) -> Any:
    """Accept what the original accepted: str, int, float, lists and str-keyed dicts of those."""
    if isinstance(value, (list, tuple)):
        return [_check_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise DefinitionError(f"MetaDB value {where}: dict key must be a string, got {k!r}")
            out[k] = _check_value(v, f"{where}.{k}")
        return out
    if isinstance(value, float):
        if not math.isfinite(value):
            raise DatasetValueError(f"MetaDB value {where}: {value} cannot be stored")
        return value
    if isinstance(value, (int, str)):
        return value
    raise DatasetTypeError(f"MetaDB value {where}: type {type(value).__name__} is not supported")


class MetaDB:
    """Key/value properties of a dataset part (put/update/delete/get/keys/has/merge_from).

    MetaDB(file) opens the store of part <name> for the original's path `<folder>/<name>.prop`;
    until this part has one, the 0.0.9 `.prop` file there (if any) is read.
    """

    def __init__(self, file: Location | str | os.PathLike, part: str | None = None):
        self._legacy = None
        if isinstance(file, Location):
            self._loc, self._name = file, meta_name(part)
            return
        folder, name = os.path.split(os.fspath(file))
        self._loc = resolve(folder or ".")
        if name.endswith(_LEGACY_SUFFIX):
            self._legacy = self._loc.path(name) if self._loc.local else None
            name = name[: -len(_LEGACY_SUFFIX)]
        self._name = meta_name(check_part_name(name))

    def _load(self) -> dict:
        try:
            data = self._loc.read_bytes(self._name)
        except FileNotFoundError:
            if self._legacy and os.path.isfile(self._legacy):
                from kpl_dataset.importers.legacy import read_prop  # here: the importers import kpl_dataset

                return read_prop(Path(self._legacy))
            return {}
        except (OSError, pa.ArrowException) as err:
            raise KPLDatasetError(f"{self._loc.describe(self._name)}: cannot read ({err})") from err
        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError) as err:
            raise KPLDatasetError(f"{self._loc.describe(self._name)}: not valid JSON ({err})") from None
        if not isinstance(doc, dict):
            raise KPLDatasetError(f"{self._loc.describe(self._name)}: must hold a JSON object")
        return doc

    def _save(self, doc: dict) -> None:
        self._loc.write_atomic(self._name, json.dumps(doc, ensure_ascii=False, indent=1).encode())

    def put(self, key: str, value: Any) -> None:
        """Add a new key; raise if it exists."""
        if not isinstance(key, str):
            raise DefinitionError(f"MetaDB key must be a string, got {key!r}")
        doc = self._load()
        if key in doc:
            raise KPLDatasetError(f"key `{key}` already exist")
        doc[key] = _check_value(value, key)
        self._save(doc)

    def update(self, key: str, value: Any) -> None:
        """Replace the value of an existing key; raise if it is missing."""
        doc = self._load()
        if key not in doc:
            raise DatasetKeyError(f"key `{key}` not exist")
        doc[key] = _check_value(value, key)
        self._save(doc)

    def delete(self, key: str) -> None:
        """Remove a key (nothing happens when it is missing)."""
        doc = self._load()
        if key in doc:
            del doc[key]
            self._save(doc)

    def get(self, key: str) -> Any:
        """Return the value of a key, or None."""
        return self._load().get(key)

    def keys(self) -> tuple:
        """Return all keys."""
        return tuple(self._load())

    def has(self, key: str) -> bool:
        """Say whether a key exists."""
        return key in self._load()

    def merge_from(self, other: MetaDB) -> None:
        """Copy every key of another MetaDB into this one, overwriting."""
        if not isinstance(other, MetaDB):
            raise DefinitionError(f"should be MetaDB object. but get `{type(other)}`")
        doc = self._load()
        for k, v in other._load().items():
            doc[k] = v
        self._save(doc)

    def __str__(self) -> str:
        return "".join(f">>> {k} = {v}\n" for k, v in self._load().items())
