"""Node types: their parameters, the inputs they name, and their output schemas from their inputs'."""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol

import pyarrow as pa
from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic_core import PydanticCustomError

if TYPE_CHECKING:
    from ..algorithms.spec import Port

from . import sql
from .schema import Output, names

PORT = "out"  # the port of a node with one output
ALGORITHM_FUNCTIONS = ("train", "test", "infer", "deploy", "compile")

Report = Callable[[str, str], None]  # (parameter, message)


class Catalog(Protocol):
    """What validation asks the catalog: pinned refs, dataset schemas, algorithm functions."""

    def dataset(self, ref: str, part: str | None) -> tuple[str, pa.Schema]: ...

    def model(self, ref: str) -> str: ...

    def algorithm(self, ref: str, function: str) -> tuple[str, list[Port], list[str]]: ...


class Params(BaseModel):
    """Parameters of a node (the keys of its YAML mapping besides `type`)."""

    model_config = ConfigDict(extra="forbid")


class NodeType(ABC):
    """A kind of node: parameter model, named inputs, output ports and schema inference."""

    name: str
    version = 1
    category = "processor"
    params: type[Params]
    description = ""

    def inputs(self, p: Any) -> dict[str, str]:
        """Return parameter -> referenced `node` or `node.port`."""
        return {"input": p.input} if hasattr(p, "input") else {}

    @abstractmethod
    def infer(
        self, p: Any, inputs: dict[str, Output], catalog: Catalog, report: Report
    ) -> dict[str, Output] | None:
        """Return the output ports' schemas, or None after report()ing why there are none."""


def _field(schema: pa.Schema, name: str, parameter: str, what: str, report: Report) -> pa.Field | None:
    if name not in schema.names:
        report(parameter, f'field "{name}" is not in {what} (fields: {names(schema)})')
        return None
    return schema.field(name)


def _new(schema: pa.Schema, name: str, parameter: str, report: Report) -> bool:
    if name in schema.names:
        report(parameter, f'field "{name}" already exists in the input; rename it first')
        return False
    return True


def _dataset(inputs: dict[str, Output], key: str, report: Report) -> pa.Schema | None:
    out = inputs.get(key)
    if out is None:
        return None
    if out.kind != "dataset" or out.schema is None:
        report(key, "needs a dataset with known fields (save a job's output and read it with a dataset node)")
        return None
    return out.schema


# sources


class DatasetParams(Params):
    dataset: str = Field(description="catalog dataset: NAME (latest version) or NAME:VERSION")
    part: str | None = Field(None, description="part to read (default: root, or the first part)")


class DatasetNode(NodeType):
    name, category, params = "dataset", "source", DatasetParams
    description = "A catalog dataset (latest version unless pinned)."

    def infer(self, p, inputs, catalog, report):
        try:
            _, schema = catalog.dataset(p.dataset, p.part)
        except LookupError as err:
            report("dataset", str(err))
            return None
        return {PORT: Output("dataset", schema, catalog=True)}


class ModelParams(Params):
    model: str = Field(description="catalog model: NAME (latest version) or NAME:VERSION")


class ModelNode(NodeType):
    name, category, params = "model", "source", ModelParams
    description = "A catalog model (latest version unless pinned)."

    def infer(self, p, inputs, catalog, report):
        try:
            catalog.model(p.model)
        except LookupError as err:
            report("model", str(err))
            return None
        return {PORT: Output("model", catalog=True)}


# processors


class RegexParams(Params):
    input: str
    field: str = Field(description="String field to match")
    pattern: str = Field(
        description="regular expression; each named group (?P<name>…) becomes a String field"
    )


class RegexExtract(NodeType):
    name, params = "regex_extract", RegexParams
    description = (
        "Named groups of a regular expression become new String fields (null where it does not match)."
    )

    def infer(self, p, inputs, catalog, report):
        schema = _dataset(inputs, "input", report)
        try:
            groups = list(re.compile(p.pattern).groupindex)
        except re.error as err:
            report("pattern", f"not a regular expression: {err}")
            return None
        if not groups:
            report("pattern", "has no named group (?P<name>…) to extract")
            return None
        probe = sql.describe(
            {"t": pa.schema([("s", pa.string())])},
            f"SELECT regexp_matches(s, {sql.string(p.pattern)}) FROM t",
        )
        if isinstance(probe, str):
            report("pattern", f"the engine refuses it: {probe}")
            return None
        if schema is None:
            return None
        field = _field(schema, p.field, "field", "the input", report)
        if field is None:
            return None
        if field.type != pa.string():
            report("field", f'field "{p.field}" is not a String')
            return None
        if not all(_new(schema, g, "pattern", report) for g in groups):
            return None
        out = schema
        for g in groups:
            out = out.append(pa.field(g, pa.string(), nullable=True))
        return {PORT: Output("dataset", out)}


class SelectParams(Params):
    input: str
    where: str = Field(description="SQL boolean expression over the fields, e.g. type = 'JPEGImages'")


class Select(NodeType):
    name, params = "select", SelectParams
    description = "Keep the records where a boolean SQL expression holds."

    def infer(self, p, inputs, catalog, report):
        schema = _dataset(inputs, "input", report)
        if schema is None:
            return None
        try:
            result = sql.describe({"input": schema}, sql.where_query(p.where, "input"))
            check = sql.describe({"input": schema}, sql.where_query(p.where, "input", value="w"))
        except sql.Refused as err:
            report("where", str(err))
            return None
        if isinstance(result, str):
            report("where", result)
            return None
        if not isinstance(check, str) and check.field("w").type != pa.bool_():
            report("where", f"is not a boolean expression (it gives {check.field('w').type})")
            return None
        return {PORT: Output("dataset", schema)}


class RenameParams(Params):
    input: str
    fields: dict[str, str] = Field(min_length=1, description="old name -> new name")


class Rename(NodeType):
    name, params = "rename", RenameParams
    description = "Rename fields; the old names are gone."

    def infer(self, p, inputs, catalog, report):
        schema = _dataset(inputs, "input", report)
        if schema is None:
            return None
        ok = all(_field(schema, old, f"fields.{old}", "the input", report) is not None for old in p.fields)
        final = [p.fields.get(n, n) for n in schema.names]
        for new in p.fields.values():
            if final.count(new) > 1:
                report(f"fields.{new}", f'field "{new}" would appear twice')
                ok = False
        if not ok:
            return None
        return {
            PORT: Output("dataset", pa.schema([f.with_name(p.fields.get(f.name, f.name)) for f in schema]))
        }


class JoinParams(Params):
    left: str
    right: str
    on: str = Field(description="key field present in both inputs")
    fields: list[str] | None = Field(None, description="right fields to add (default: all but the key)")


class LeftJoin(NodeType):
    name, params = "left_join", JoinParams
    description = "Every left record once per matching right record; right fields null where none match."

    def inputs(self, p):
        return {"left": p.left, "right": p.right}

    def infer(self, p, inputs, catalog, report):
        left = _dataset(inputs, "left", report)
        right = _dataset(inputs, "right", report)
        if left is None or right is None:
            return None
        lkey = _field(left, p.on, "on", f'left input "{p.left}"', report)
        rkey = _field(right, p.on, "on", f'right input "{p.right}"', report)
        if lkey is None or rkey is None:
            return None
        if lkey.type != rkey.type:
            report("on", f'field "{p.on}" is {lkey.type} on the left and {rkey.type} on the right')
            return None
        wanted = p.fields if p.fields is not None else [n for n in right.names if n != p.on]
        out = left
        for name in wanted:
            field = _field(right, name, "fields", f'right input "{p.right}"', report)
            if field is None:
                return None
            if name in left.names:
                report("fields", f'field "{name}" is in both inputs; rename it in one of them first')
                return None
            out = out.append(field.with_nullable(True))
        return {PORT: Output("dataset", out)}


class LabelIdParams(Params):
    input: str
    field: str = Field(description="field holding the label (e.g. the class name)")
    output: str = Field(description="new Int field: ids 0..n-1 over the sorted distinct labels")


class LabelId(NodeType):
    name, params = "label_id", LabelIdParams
    description = "Number the sorted distinct values of a field 0..n-1; the mapping goes in the metadata."

    def infer(self, p, inputs, catalog, report):
        schema = _dataset(inputs, "input", report)
        if schema is None:
            return None
        field = _field(schema, p.field, "field", "the input", report)
        if field is None or not _new(schema, p.output, "output", report):
            return None
        if pa.types.is_nested(field.type) or field.type == pa.binary():
            report("field", f'field "{p.field}" must be a String, Int, Float or Bool')
            return None
        return {
            PORT: Output("dataset", schema.append(pa.field(p.output, pa.int64(), nullable=field.nullable)))
        }


BOX = pa.struct(
    [
        pa.field(n, pa.string() if n == "name" else pa.int64(), nullable=False)
        for n in ("name", "xmin", "ymin", "xmax", "ymax", "difficult")
    ]
)
OBJECTS = pa.list_(pa.field("item", BOX, nullable=False))
ANNOTATION_FIELDS = {"object": OBJECTS, "width": pa.int64(), "height": pa.int64()}


class ParseParams(Params):
    input: str
    field: str = Field("content", description="ByteArray or String field holding the annotation")


class ParseAnnotation(NodeType):
    params = ParseParams

    def __init__(self, name: str, what: str):
        self.name = name
        self.description = (
            f"Parse {what} annotations into object (name, xmin, ymin, xmax, ymax, difficult), width, height."
        )

    def infer(self, p, inputs, catalog, report):
        schema = _dataset(inputs, "input", report)
        if schema is None:
            return None
        field = _field(schema, p.field, "field", "the input", report)
        if field is None:
            return None
        if field.type not in (pa.binary(), pa.string()):
            report("field", f'field "{p.field}" must be a ByteArray or String')
            return None
        if not all(_new(schema, n, "field", report) for n in ANNOTATION_FIELDS):
            return None
        out = schema
        for n, t in ANNOTATION_FIELDS.items():
            out = out.append(pa.field(n, t, nullable=field.nullable))
        return {PORT: Output("dataset", out)}


class SplitParams(Params):
    input: str
    ratios: dict[str, float] = Field(
        min_length=1, description="part name -> fraction; the fractions add up to 1"
    )
    seed: int = 0


class Split(NodeType):
    name, params = "split", SplitParams
    description = "Split the records into named parts by fraction, the same way for the same seed."

    def infer(self, p, inputs, catalog, report):
        schema = _dataset(inputs, "input", report)
        bad = [k for k, v in p.ratios.items() if not (0 < v <= 1)]
        if bad:
            report("ratios", f"fractions must be in (0, 1]: {', '.join(bad)}")
            return None
        if not math.isclose(sum(p.ratios.values()), 1.0, abs_tol=1e-9):
            report("ratios", f"fractions add up to {sum(p.ratios.values()):g}, not 1")
            return None
        if any(not re.match(r"^[A-Za-z0-9_][A-Za-z0-9_-]*$", k) for k in p.ratios):
            report("ratios", "part names are letters, digits, _ and -")
            return None
        if schema is None:
            return None
        return {k: Output("dataset", schema) for k in p.ratios}


class SampleParams(Params):
    input: str
    fraction: float = Field(gt=0, le=1, description="share of the records kept")
    seed: int = 0


class Sample(NodeType):
    name, params = "sample", SampleParams
    description = "Keep a random share of the records (the same ones for the same seed)."

    def infer(self, p, inputs, catalog, report):
        schema = _dataset(inputs, "input", report)
        return None if schema is None else {PORT: Output("dataset", schema)}


class ShuffleParams(Params):
    input: str
    seed: int = 0


class Shuffle(NodeType):
    name, params = "shuffle", ShuffleParams
    description = "Put the records in a random order (the same for the same seed)."

    def infer(self, p, inputs, catalog, report):
        schema = _dataset(inputs, "input", report)
        return None if schema is None else {PORT: Output("dataset", schema)}


class SqlParams(Params):
    inputs: dict[str, str] = Field(min_length=1, description="table name in the query -> node or node.port")
    query: str = Field(description="one SELECT over the named tables")


class Sql(NodeType):
    name, params = "sql", SqlParams
    description = "One SELECT over the named inputs (DuckDB SQL; no file access, no other tables)."

    def inputs(self, p):
        return {f"inputs.{k}": v for k, v in p.inputs.items()}

    def infer(self, p, inputs, catalog, report):
        tables = {}
        for key in p.inputs:
            schema = _dataset(inputs, f"inputs.{key}", report)
            if schema is None:
                return None
            tables[key] = schema
        try:
            sql.check_select(p.query, list(tables))
        except sql.Refused as err:
            report("query", str(err))
            return None
        result = sql.describe(tables, p.query)
        if isinstance(result, str):
            report("query", result)
            return None
        return {PORT: Output("dataset", result)}


def _catalog_name(name: str) -> str:
    """Check a name a run gives a catalog entry by the catalog's own rule: at validation, not when the run gets there."""
    from ..catalog.storage import check_name
    from ..errors import BadRequest

    try:
        return check_name(name)
    except BadRequest as err:
        raise PydanticCustomError("catalog_name", err.message) from None


CatalogName = Annotated[str, AfterValidator(_catalog_name)]


class SaveDatasetParams(Params):
    input: str
    name: CatalogName = Field(
        description="catalog dataset name; each run adds a version (same content: same version)"
    )
    description: str = ""


class SaveDataset(NodeType):
    name, category, params = "save_dataset", "sink", SaveDatasetParams
    description = "Register the input as a catalog dataset version, with lineage to the run."

    def infer(self, p, inputs, catalog, report):
        schema = _dataset(inputs, "input", report)
        return None if schema is None else {PORT: Output("dataset", schema, catalog=True)}


class SaveModelParams(Params):
    input: str = Field(description="an algorithm node's model output (node.port) or a model node")
    name: CatalogName = Field(description="catalog model name")
    description: str = ""


class SaveModel(NodeType):
    name, category, params = "save_model", "sink", SaveModelParams
    description = "Register a job's model output under a catalog model name."

    def infer(self, p, inputs, catalog, report):
        out = inputs.get("input")
        if out is None:
            return None
        if out.kind != "model":
            report("input", "is not a model (an algorithm node's output or a model node)")
            return None
        return {PORT: Output("model", catalog=True)}


class AlgorithmParams(Params):
    algorithm: str = Field(description="catalog algorithm: NAME or NAME:VERSION")
    inputs: dict[str, str] = Field(
        default_factory=dict, description="environment.yml input key -> node or node.port"
    )
    parameters: dict[str, Any] = Field(default_factory=dict, description="checked against parameter.yml")
    resources: dict[str, Any] | None = Field(
        None, description="cpu, memory, gpu, … (default: environment.yml)"
    )
    outputs: Literal["model", "dataset"] = Field("model", description="what the function's outputs are")


class AlgorithmNode(NodeType):
    category, params = "algorithm", AlgorithmParams

    def __init__(self, function: str):
        self.name = function
        self.description = (
            f"Run the algorithm's {function} function as a job (queued under the project's quota)."
        )

    def inputs(self, p):
        return {f"inputs.{k}": v for k, v in p.inputs.items()}

    def infer(self, p, inputs, catalog, report):
        try:
            _, ports, outputs = catalog.algorithm(p.algorithm, self.name)
        except LookupError as err:
            report("algorithm", str(err))
            return None
        wanted = [port.key for port in ports]
        optional = {port.key for port in ports if port.optional}
        ok = True
        for key in p.inputs:
            if key not in wanted:
                report(
                    f"inputs.{key}",
                    f"is not an input of {self.name} in environment.yml (inputs: {', '.join(wanted) or 'none'})",
                )
                ok = False
        missing = [k for k in wanted if k not in p.inputs and k not in optional]
        if missing:
            report("inputs", f"environment.yml's {self.name} also needs: {', '.join(missing)}")
            ok = False
        for key, out in inputs.items():
            if out.kind == "dataset" and not out.catalog:
                report(key, "a job reads catalog entries: save this input with a save_dataset node first")
                ok = False
        if not ok:
            return None
        return {key: Output(p.outputs, catalog=True) for key in outputs}


NODE_TYPES: dict[str, NodeType] = {
    t.name: t
    for t in [
        DatasetNode(),
        ModelNode(),
        RegexExtract(),
        Select(),
        Rename(),
        LeftJoin(),
        LabelId(),
        ParseAnnotation("parse_voc", "Pascal VOC XML"),
        ParseAnnotation("parse_labelme", "Labelme JSON"),
        ParseAnnotation("parse_coco", "COCO JSON (one image's document per record)"),
        Split(),
        Sample(),
        Shuffle(),
        Sql(),
        SaveDataset(),
        SaveModel(),
        *(AlgorithmNode(f) for f in ALGORITHM_FUNCTIONS),
    ]
}
