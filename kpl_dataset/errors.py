"""Errors raised by kpl_dataset."""


class KPLDatasetError(Exception):
    """Raise for bad input, damaged files or misuse, with what and where in the message."""
