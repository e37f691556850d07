"""Field schemas that flow along edges: Arrow schemas mapped to kpl-dataset record types."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from kpl_dataset.schema import to_arrow_schema

PORT = "out"  # the port of a node with one output

# Arrow types the engine may return, narrowed to the ones a dataset stores.
_WIDEN = {
    **{t: pa.int64() for t in (pa.int8(), pa.int16(), pa.int32(), pa.uint8(), pa.uint16(), pa.uint32())},
    pa.float16(): pa.float64(),
    pa.float32(): pa.float64(),
    pa.large_string(): pa.string(),
    pa.string_view(): pa.string(),
    pa.large_binary(): pa.binary(),
    pa.binary_view(): pa.binary(),
}


@dataclass
class Output:
    """What one node port gives its consumers: a dataset of a schema, or a model."""

    kind: str  # "dataset" or "model"
    schema: pa.Schema | None = None
    catalog: bool = False  # a catalog entry (a job can read it), not a run's intermediate data
    ref: str | None = None  # the catalog version a source's check found (NAME:VERSION): what a run reads
    part: str | None = None  # and its part

    def to_dict(self) -> dict:
        return {"kind": self.kind, "fields": None if self.schema is None else describe(self.schema)}

    def to_record(self) -> dict:
        """Return it as JSON, as a run keeps its checked pipeline (`from_record` reads it back)."""
        schema = None if self.schema is None else schema_json(self.schema)
        return {
            "kind": self.kind,
            "schema": schema,
            "catalog": self.catalog,
            "ref": self.ref,
            "part": self.part,
        }

    @classmethod
    def from_record(cls, data: dict) -> Output:
        schema = None if data["schema"] is None else schema_from_json(data["schema"])
        return cls(data["kind"], schema, data["catalog"], data["ref"], data["part"])


def record_type(t: pa.DataType) -> Any:
    """Return the kpl-dataset record_type of an Arrow type; TypeError when none fits."""
    t = _WIDEN.get(t, t)
    simple = {pa.string(): "String", pa.int64(): "Int", pa.float64(): "Float", pa.binary(): "ByteArray"}
    if t in simple:
        return simple[t]
    if t == pa.bool_():
        return "Bool"
    if pa.types.is_struct(t):
        return {f.name: record_type(f.type) for f in t}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [record_type(t.value_type)]
    if pa.types.is_decimal(t):
        return "Float"
    raise TypeError(f"type {t} has no dataset field type (String, Int, Float, ByteArray, Bool, lists, dicts)")


def dataset_schema(schema: pa.Schema) -> pa.Schema:
    """Return the stored form of a schema (kpl-dataset types, nullability kept)."""
    types = {f.name: record_type(f.type) for f in schema}
    nullable = [f.name for f in schema if f.nullable]
    return to_arrow_schema(types, nullable)


def from_record_type(types: dict, nullable: Any = ()) -> pa.Schema:
    """Return the Arrow schema of a record_type."""
    return to_arrow_schema(types, nullable)


def schema_json(schema: pa.Schema) -> dict:
    """Return a dataset schema as JSON (its record types and nullable fields)."""
    return {
        "types": {f.name: record_type(f.type) for f in schema},
        "nullable": [f.name for f in schema if f.nullable],
    }


def schema_from_json(data: dict) -> pa.Schema:
    """Return the schema `schema_json` described."""
    return from_record_type(data["types"], data["nullable"])


def type_name(t: pa.DataType) -> str:
    """Return a short display of a field type: String, Int, List[Dict{name: String}] ..."""
    rt = record_type(t)
    return _show(rt)


def _show(rt: Any) -> str:
    if isinstance(rt, dict):
        return "Dict{" + ", ".join(f"{k}: {_show(v)}" for k, v in rt.items()) + "}"
    if isinstance(rt, list):
        return f"List[{_show(rt[0])}]"
    return rt


def describe(schema: pa.Schema) -> list[dict]:
    """Return [{name, type, nullable}] of a schema, for people and the editors."""
    return [{"name": f.name, "type": type_name(f.type), "nullable": f.nullable} for f in schema]


def names(schema: pa.Schema, limit: int = 8) -> str:
    """Return the field names for a message (the first few, then …)."""
    shown = schema.names[:limit]
    return ", ".join(shown) + (", …" if len(schema.names) > limit else "")
