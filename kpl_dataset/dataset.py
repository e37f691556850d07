"""The module names of kpl-dataset 0.0.9: `from kpl_dataset.dataset import ReadOnlyDataset` keeps working."""

from kpl_dataset.metadb import MetaDB
from kpl_dataset.names import DEFAULT_PART as DEFAULT_DATA_NAME
from kpl_dataset.reader import ReadOnlyDataset
from kpl_dataset.writer import WriteOnlyDataset

__all__ = ["DEFAULT_DATA_NAME", "MetaDB", "ReadOnlyDataset", "WriteOnlyDataset"]
