"""Errors raised by kpl_dataset.

Every error is a KPLDatasetError; each also inherits the built-in exception kpl-dataset
0.0.9 raised in the same case, so `except TypeError:` written for the original still works.
"""

from __future__ import annotations


class KPLDatasetError(Exception):
    """Raise for bad input, damaged files or misuse, with what and where in the message."""


class DatasetTypeError(KPLDatasetError, TypeError, AttributeError):
    """Raise for a value of the wrong type in a record or a MetaDB.

    The original raised TypeError, or AttributeError for a String field given a non-str
    and for a record that is not a dict.
    """


class DatasetKeyError(KPLDatasetError, KeyError):
    """Raise for a record key the record_type does not have (KeyError, as the original)."""

    __str__ = Exception.__str__  # KeyError would show the message in quotes


class DatasetValueError(KPLDatasetError, ValueError):
    """Raise for a value out of range (an Int over 64 bits) or a write after close()."""


class DefinitionError(KPLDatasetError, ValueError, AssertionError):
    """Raise for a record_type or MetaDB argument the original refused with an assert."""


class DatasetOSError(KPLDatasetError, OSError):
    """Raise when a file cannot be read or written."""

    __str__ = Exception.__str__  # the message already names the file and the reason


class DatasetNotFoundError(DatasetOSError, FileNotFoundError):
    """Raise when a dataset, part or file a value names does not exist."""
