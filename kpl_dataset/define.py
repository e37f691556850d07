"""The messages of kpl-dataset 0.0.9's `define` (its protobuf module), as plain objects.

Code written for 0.0.9 reaches them as `kpl_dataset.record.define` and gets them from
`RecordDefine`: records as `FeatureMap`, record types as `Meta`/`RecordType`. They hold the
same fields (`feature.bytes_field`, `meta.record_type.keys`, ...) and copy with `CopyFrom`;
datasets are not stored as protobuf any more, so they have no wire format.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from typing import Any


class _Message:
    """A message: fields with their defaults, copied whole by `CopyFrom`."""

    _defaults: dict[str, Any] = {}

    def __init__(self, **fields: Any) -> None:
        for name, default in self._defaults.items():
            setattr(self, name, copy.deepcopy(default))
        self._nested()
        for name, value in fields.items():
            if name not in self._defaults and not hasattr(self, name):
                raise ValueError(f'{type(self).__name__} has no field "{name}"')
            setattr(self, name, value)

    def _nested(self) -> None:
        """Make the message's sub-messages (each its own)."""

    def CopyFrom(self, other: _Message) -> None:  # noqa: N802 - protobuf's name
        """Make this message a copy of `other`."""
        if type(other) is not type(self):
            raise TypeError(f"CopyFrom: expected a {type(self).__name__}, got a {type(other).__name__}")
        self.__dict__.update(copy.deepcopy(other.__dict__))

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.__dict__ == other.__dict__

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items())
        return f"{type(self).__name__}({shown})"


class _Repeated(list):
    """A repeated message field: `add()` appends a new message."""

    def __init__(self, kind: type[_Message]) -> None:
        super().__init__()
        self.kind = kind

    def add(self) -> _Message:
        item = self.kind()
        self.append(item)
        return item


class FileContent(_Message):
    """A File value: small ones hold their bytes, large ones the first 512 and their `file_path`."""

    class FileType:
        small = 0
        large = 1

    _defaults = {"type": 0, "size": 0, "bytes_field": b"", "file_path": ""}


class Feature(_Message):
    """One value: a number, bytes (and text), a file, a list or a map."""

    _defaults = {"int64_field": 0, "float64_field": 0.0, "bytes_field": b""}

    def _nested(self) -> None:
        self.file_field = FileContent()
        self.feature_list_field = FeatureList()
        self.feature_map_field = FeatureMap()


class FeatureList(_Message):
    """A list value."""

    def _nested(self) -> None:
        self.list = _Repeated(Feature)


class FeatureMap(_Message):
    """A map value (a record): key -> Feature, made on first use as protobuf's maps are."""

    def _nested(self) -> None:
        self.map: defaultdict[str, Feature] = defaultdict(Feature)


class RecordType(_Message):
    """A record type: a basic type, a list of `item`, or a map of `properties` in `keys` order."""

    class BasicType:
        unKnow = 0
        string = 1
        int64 = 2
        float64 = 3
        bytes = 4
        file = 5
        list = 6
        map = 7

    _defaults = {"basicType": 0}

    def _nested(self) -> None:
        self.keys: list[str] = []
        self.properties: defaultdict[str, RecordType] = defaultdict(RecordType)
        self._item: RecordType | None = None

    @property
    def item(self) -> RecordType:
        """Return the item type of a list (made on first use)."""
        if self._item is None:
            self._item = RecordType()
        return self._item


class Meta(_Message):
    """A dataset part's name (`id`), format `version` and `record_type`."""

    _defaults = {"version": 0, "id": ""}

    def _nested(self) -> None:
        self.record_type = RecordType()
