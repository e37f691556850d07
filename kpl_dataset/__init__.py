"""kpl_dataset: a typed record format on Apache Arrow, compatible with kpl-dataset 0.0.9.

The names below are imported on first use (PEP 562), so that a module of the package that
needs no Arrow (`kpl_dataset.names`: a folder's file names) loads without pyarrow and numpy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what type checkers and editors read; `X as X` re-exports
    from kpl_dataset.errors import KPLDatasetError as KPLDatasetError
    from kpl_dataset.files import FileType as FileType
    from kpl_dataset.files import set_size_threshold as set_size_threshold
    from kpl_dataset.manifest import list_parts as list_parts
    from kpl_dataset.metadb import MetaDB as MetaDB
    from kpl_dataset.reader import ReadOnlyDataset as ReadOnlyDataset
    from kpl_dataset.schema import BasicType as BasicType
    from kpl_dataset.writer import WriteOnlyDataset as WriteOnlyDataset

_MODULE_OF = {
    "BasicType": "schema",
    "FileType": "files",
    "KPLDatasetError": "errors",
    "MetaDB": "metadb",
    "ReadOnlyDataset": "reader",
    "WriteOnlyDataset": "writer",
    "list_parts": "manifest",
    "set_size_threshold": "files",
}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str):
    if name not in _MODULE_OF:
        raise AttributeError(f"module 'kpl_dataset' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"kpl_dataset.{_MODULE_OF[name]}"), name)
    globals()[name] = value  # once: later lookups find it without this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
