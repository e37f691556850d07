"""kpl_dataset: a typed record format on Apache Arrow, compatible with kpl-dataset 0.0.9."""

from kpl_dataset.errors import KPLDatasetError
from kpl_dataset.files import FileType, set_size_threshold
from kpl_dataset.manifest import list_parts
from kpl_dataset.metadb import MetaDB
from kpl_dataset.reader import ReadOnlyDataset
from kpl_dataset.schema import BasicType
from kpl_dataset.writer import WriteOnlyDataset

__all__ = [
    "BasicType",
    "FileType",
    "KPLDatasetError",
    "MetaDB",
    "ReadOnlyDataset",
    "WriteOnlyDataset",
    "list_parts",
    "set_size_threshold",
]
