"""The module names of kpl-dataset 0.0.9: `from kpl_dataset.record import BasicType` keeps working."""

from kpl_dataset.files import FileType, set_size_threshold
from kpl_dataset.schema import BasicType

__all__ = ["BasicType", "FileType", "set_size_threshold"]
