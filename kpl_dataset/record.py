"""The module names of kpl-dataset 0.0.9: `from kpl_dataset.record import BasicType` keeps working.

`RecordDefine` and `define` are 0.0.9's record encoder and its messages, for code that
called them itself: a record to a `define.FeatureMap` and back, a record type to a
`define.Meta` and back. The datasets themselves are written by `WriteOnlyDataset`.
"""

from __future__ import annotations

import os
import shutil
import uuid
from typing import Any

from kpl_dataset import define, files
from kpl_dataset.files import FileType, set_size_threshold
from kpl_dataset.schema import BasicType

__all__ = ["BasicType", "FileType", "RecordDefine", "define", "set_size_threshold"]

_FILE_ROOT = "files"
_BASIC = {
    BasicType.String: define.RecordType.BasicType.string,
    BasicType.Int: define.RecordType.BasicType.int64,
    BasicType.Float: define.RecordType.BasicType.float64,
    BasicType.ByteArray: define.RecordType.BasicType.bytes,
    BasicType.File: define.RecordType.BasicType.file,
}
_NAMED = {number: name for name, number in _BASIC.items()}


def _refuse(message: str) -> AssertionError:
    return AssertionError(f"[RecordType] {message}")


class RecordDefine:
    """0.0.9's encoder of records and record types (`ROOT`: the dataset folder large files go to)."""

    ROOT: str | None = None

    @staticmethod
    def encode(value: dict, record_type: dict) -> define.FeatureMap:
        """Return a record as a FeatureMap."""
        feature = define.FeatureMap()
        RecordDefine.encode_map(value, feature, record_type)
        return feature

    @staticmethod
    def decode(feature: define.FeatureMap, record_type: dict) -> dict:
        """Return the record a FeatureMap holds."""
        return RecordDefine.decode_map(feature, record_type)

    @staticmethod
    def encode_map(value: dict, proto: define.FeatureMap, record_type: dict) -> None:
        """Put a map's values into `proto`."""
        for key, item in value.items():
            if not isinstance(key, str):
                raise AssertionError(f"a record's keys are strings, got {key!r}")
            feature = define.Feature()
            if isinstance(item, list | tuple):
                RecordDefine.encode_list(item, feature.feature_list_field, record_type[key])
            elif isinstance(item, dict):
                RecordDefine.encode_map(item, feature.feature_map_field, record_type[key])
            else:
                RecordDefine.encode_basic(item, feature, record_type[key])
            proto.map[key].CopyFrom(feature)

    @staticmethod
    def encode_list(value: list, proto: define.FeatureList, record_type: list) -> None:
        """Put a list's values into `proto`."""
        for item in value:
            feature = proto.list.add()
            if isinstance(item, list | tuple):
                RecordDefine.encode_list(item, feature.feature_list_field, record_type[0])
            elif isinstance(item, dict):
                RecordDefine.encode_map(item, feature.feature_map_field, record_type[0])
            else:
                RecordDefine.encode_basic(item, feature, record_type[0])

    @staticmethod
    def encode_basic(value: Any, proto: define.Feature, record_type: str) -> None:
        """Put one value into `proto`; a File's path is read (a large file copied under ROOT)."""
        if record_type == BasicType.Int:
            proto.int64_field = value
        elif record_type == BasicType.ByteArray:
            proto.bytes_field = value
        elif record_type == BasicType.String:
            proto.bytes_field = value.encode()
        elif record_type == BasicType.Float:
            proto.float64_field = value
        elif record_type == BasicType.File:
            size = os.path.getsize(value)
            large = size > files.size_threshold()
            with open(value, "rb") as source:
                content = source.read(files.PREVIEW_BYTES) if large else source.read()
            kind = define.FileContent.FileType
            proto.file_field.CopyFrom(
                define.FileContent(type=kind.large if large else kind.small, size=size, bytes_field=content)
            )
            if large:
                relative = f"{_FILE_ROOT}/{uuid.uuid1().hex}"
                shutil.copyfile(value, f"{RecordDefine.ROOT}/{relative}")
                proto.file_field.file_path = relative
        else:
            raise Exception(f"Type `{record_type}` not supported")

    @staticmethod
    def decode_basic(feature: define.Feature, record_type: str) -> Any:
        """Return one value of `feature` (a File as its type, content, file_path and size)."""
        if record_type == BasicType.Int:
            return feature.int64_field
        if record_type == BasicType.ByteArray:
            return feature.bytes_field
        if record_type == BasicType.Float:
            return feature.float64_field
        if record_type == BasicType.String:
            from kpl_dataset.importers.legacy import decode_text  # UTF-8, else GBK, as 0.0.9 read text

            return decode_text(feature.bytes_field)
        if record_type == BasicType.File:
            file = feature.file_field
            return {
                "type": file.type,
                "content": file.bytes_field,
                "file_path": file.file_path,
                "size": file.size,
            }
        raise Exception(f"Type `{record_type}` not supported")

    @staticmethod
    def decode_map(feature: define.FeatureMap, record_type: dict) -> dict:
        """Return the map `feature` holds, key by key of `record_type`."""
        values = {}
        for key, kind in record_type.items():
            item = feature.map[key]
            if isinstance(kind, list):
                values[key] = RecordDefine.decode_list(item.feature_list_field, kind)
            elif isinstance(kind, dict):
                values[key] = RecordDefine.decode_map(item.feature_map_field, kind)
            else:
                values[key] = RecordDefine.decode_basic(item, kind)
        return values

    @staticmethod
    def decode_list(feature: define.FeatureList, record_type: list) -> list:
        """Return the list `feature` holds."""
        kind = record_type[0]
        if isinstance(kind, list):
            return [RecordDefine.decode_list(item.feature_list_field, kind) for item in feature.list]
        if isinstance(kind, dict):
            return [RecordDefine.decode_map(item.feature_map_field, kind) for item in feature.list]
        return [RecordDefine.decode_basic(item, kind) for item in feature.list]

    @staticmethod
    def encode_meta(record_type: Any, id: str, version: int) -> define.Meta:  # noqa: A002 - 0.0.9's name
        """Return a part's Meta: its name, format version and record type."""
        meta = define.Meta(version=version, id=id)
        meta.record_type.CopyFrom(RecordDefine._encode_meta(record_type))
        return meta

    @staticmethod
    def _encode_meta(record_type: Any) -> define.RecordType:
        kinds = define.RecordType.BasicType
        encoded = define.RecordType()
        if isinstance(record_type, dict):
            if not record_type:
                raise _refuse("dict cannot be empty")
            encoded.basicType = kinds.map
            for key, kind in record_type.items():
                if not isinstance(key, str):
                    raise _refuse(f"key must be string. but get {key}: {type(key)}")
                encoded.keys.append(key)
                encoded.properties[key].CopyFrom(RecordDefine._encode_meta(kind))
        elif isinstance(record_type, list):
            if len(record_type) != 1:
                raise _refuse(f"list length must equals 1. but get {record_type}")
            encoded.basicType = kinds.list
            encoded.item.CopyFrom(RecordDefine._encode_meta(record_type[0]))
        elif isinstance(record_type, str) and record_type in _BASIC:
            encoded.basicType = _BASIC[record_type]
        else:
            raise Exception(f"BasicType {record_type} is not supported")
        return encoded

    @staticmethod
    def decode_meta(meta: define.RecordType) -> Any:
        """Return the record type a RecordType holds (a map's keys in their order)."""
        kinds = define.RecordType.BasicType
        if meta.basicType in _NAMED:
            return _NAMED[meta.basicType]
        if meta.basicType == kinds.list:
            return [RecordDefine.decode_meta(meta.item)]
        if meta.basicType == kinds.map:
            keys = [k for k in meta.keys if k in meta.properties] + [
                k for k in meta.properties if k not in meta.keys
            ]
            return {key: RecordDefine.decode_meta(meta.properties[key]) for key in keys}
        raise Exception(f"Unknown type {meta.basicType}")
