"""A node type: one class with its parameters, its checks, how it runs and what the editors show of it.

Three kinds of node type differ in how they run: a `Relational` one is part of its unit's one
engine query (fuse.py), a `Processor` goes over record batches in a sandboxed worker (or on
Ray), a `PlatformNode` is run by the runner in the platform (catalog reads, registrations,
jobs). Each may also have a Ray Data form (`on_ray`). A `Router` is a processor that only sends
each record of its input to one of its ports (or none) by its row number: after a relational
node it writes its ports as parts of that unit's one write.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Protocol

import pyarrow as pa
from pydantic import AfterValidator, BaseModel, ConfigDict
from pydantic_core import PydanticCustomError

from ..schema import Output, names

if TYPE_CHECKING:
    import numpy as np

    from ...algorithms.spec import Port
    from ..fuse import Query, Relation
    from ..processors import Settings, Source, _Sink
    from ..validate import Node

CATEGORIES = ("source", "processor", "sink", "algorithm")  # the editors' palette groups
Report = Callable[[str, str], None]  # (parameter, message)
Log = Callable[[str], None]

KEEP = {  # not a parameter (no part of the cache key), shown as one to the editors
    "type": "boolean",
    "default": False,
    "title": "Keep",
    "description": "write this node's output even where it could be fused into the query of "
    "the node reading it (so it can be opened and is cached on its own)",
}


class Catalog(Protocol):
    """What validation asks the catalog: pinned refs, dataset schemas, algorithm functions."""

    def dataset(self, ref: str, part: str | None) -> tuple[str, str, pa.Schema]: ...

    def model(self, ref: str) -> str: ...

    def algorithm(self, ref: str, function: str) -> tuple[str, list[Port], list[str]]: ...


class Params(BaseModel):
    """Parameters of a node (the keys of its YAML mapping besides `type`)."""

    model_config = ConfigDict(extra="forbid")


@dataclass
class Result:
    """What a finished node hands its consumers, per port."""

    outputs: dict[str, dict]  # port -> {"folder", "part", "ref", "content", "rows"}


@dataclass
class Step:
    """One node as the runner runs it in the platform: what a `PlatformNode.run` may use."""

    runner: Any  # the PipelineRunner
    project: str
    run_id: str
    pipeline: str  # the pipeline's name
    node: Node  # as the run's checked pipeline holds it
    key: str  # its cache key
    inputs: dict[str, dict]  # parameter -> the upstream port's result
    forced: bool  # run it even when cached
    stop: threading.Event
    log: Log


def registered(name: str) -> NodeType:
    """Return the registered node type NAME (what a pickled node type becomes again)."""
    from . import NODE_TYPES

    return NODE_TYPES[name]


class NodeType(ABC):
    """A kind of node: its parameters and inputs, its checks, how it runs, what the editors show."""

    # its parameters: the schema of its mapping in the file
    name: str
    version = 1  # changed when what it computes changes: its cached results are not reused
    params: type[Params]
    ports: tuple[str, ...] = ("input",)  # parameters naming one input node (node or node.port)
    named_inputs = False  # whether `inputs: {key: node}` names its inputs

    # what the editors show
    category = "processor"
    description = ""

    # how it runs (see the kinds below)
    fused = False  # part of its unit's one engine query
    keepable = False  # its output may go unwritten (fused into its readers' query) unless `keep: true`
    keeps_rows = False  # gives as many records as its input
    sorts = False  # its records' order is given by hidden order columns its unit's query sorts by
    routes = False  # a Router: each input record to one of its ports or none, by row number (`route`)
    on_ray: Callable[..., None] | None = None  # its Ray Data form: (p, inputs, sinks, settings, log)

    def inputs(self, p: Any) -> dict[str, str]:
        """Return parameter -> referenced `node` or `node.port`."""
        refs = {port: getattr(p, port) for port in self.ports}
        if self.named_inputs:
            refs.update({f"inputs.{key}": ref for key, ref in p.inputs.items()})
        return refs

    @abstractmethod
    def check(
        self, p: Any, inputs: dict[str, Output], catalog: Catalog, report: Report
    ) -> dict[str, Output] | None:
        """Return the output ports' schemas, or None after report()ing why there are none."""

    def parameter_schema(self) -> dict:
        """Return the JSON schema the editors build the node's form from (with `keep` where it applies)."""
        schema = self.params.model_json_schema()
        if self.keepable:
            schema.setdefault("properties", {})["keep"] = dict(KEEP)
        return schema

    def __reduce__(self) -> tuple:
        return registered, (self.name,)  # the registry's own instance, in a sandboxed worker too


class Relational(NodeType):
    """A node that runs as part of its unit's one engine query (a common table expression)."""

    fused = True
    keepable = True

    @abstractmethod
    def query(self, q: Query, node: Node) -> tuple[Relation, str | None]:
        """Return the node's relation in the unit's query and its body (None: no expression of its own)."""

    def unit_query(self, q: Query, p: Any, last: Relation, computed: set[str], sort: bool) -> str:
        """Return the query of a unit ending at this node."""
        return q.narrow(last, computed, sort)

    def numbering(self, p: Any) -> Numbering | None:
        """Return how a unit ending here numbers a field's labels after its query (None: it does not)."""
        return None


@dataclass
class Numbering:
    """Ids 0..n-1 of a field's sorted distinct labels, added as `output`; the mapping kept under `key`."""

    field: str
    output: str
    key: str  # where the mapping {field, labels} goes in the output's metadata

    def shown(self, labels: list) -> str:
        """Return the log line naming the labels found (the first 20)."""
        return f"{len(labels)} labels: {', '.join(map(str, labels[:20]))}{' …' if len(labels) > 20 else ''}"


class Processor(NodeType):
    """A node that goes over its inputs' record batches in a sandboxed worker."""

    @abstractmethod
    def process(
        self, p: Any, inputs: dict[str, Source], sinks: dict[str, _Sink], settings: Settings, log: Log
    ) -> None:
        """Write each output port's records into its sink."""


class Router(Processor):
    """A processor that sends each record of its one input to one of its ports, or none, by its row number alone.

    Read straight after a relational node (and by nothing else), it ends that node's unit: the
    unit's one write goes to its ports (fuse.py), the input never written. Otherwise it runs on
    its own, batch by batch. Either way the records keep their order and the input's metadata.
    """

    routes = True

    @abstractmethod
    def route(self, p: Any, rows: np.ndarray) -> np.ndarray:
        """Return each row number's port: its index in the node's outputs, or -1 for none."""

    def process(self, p, inputs, sinks, settings, log):
        import numpy as np

        from ..processors import carry_meta, int64_array

        source = inputs["input"]
        carry_meta(source, sinks)
        ports = list(sinks)
        start = 0
        for batch in source.batches():
            which = self.route(p, np.arange(start, start + batch.num_rows, dtype=np.uint64))
            start += batch.num_rows
            for i, port in enumerate(ports):
                sinks[port].write(batch.take(int64_array(np.flatnonzero(which == i))))

    def on_ray(self, p, inputs, sinks, settings, log):
        import pyarrow.compute as pc

        from .. import ray_backend
        from ..processors import carry_meta
        from ..ray_backend import PART

        source = inputs["input"]
        carry_meta(source, sinks)
        ports = list(sinks)

        def write(batch: pa.RecordBatch) -> None:
            part = batch.column(PART)
            batch = batch.drop_columns([PART])
            for i, port in enumerate(ports):
                sinks[port].write(batch.filter(pc.equal(part, i)))

        numbered = ray_backend.dataset(source, numbered=True)
        ray_backend.drain(ray_backend.map_blocks(numbered, _routed_block, node=self, p=p), write)


def _routed_block(table: pa.Table, node: Router, p: Any) -> pa.Table:
    """Return a numbered block's routed records with their port (PART), on a Ray worker."""
    import numpy as np

    from ..processors import int64_array
    from ..ray_backend import PART, ROW

    which = node.route(p, table.column(ROW).to_numpy())
    kept = np.flatnonzero(which >= 0)
    return table.drop_columns([ROW]).take(int64_array(kept)).append_column(PART, int64_array(which[kept]))


class PlatformNode(NodeType):
    """A node the runner runs in the platform: it reads or registers catalog entries, or runs a job."""

    @abstractmethod
    def run(self, step: Step) -> tuple[Result, bool, str | None]:
        """Return its result, whether it was reused from the cache, and the job it ran (if any)."""


# checks several node types share


def find_field(schema: pa.Schema, name: str, parameter: str, what: str, report: Report) -> pa.Field | None:
    """Return the field NAME of schema, or None after reporting it is not there."""
    if name not in schema.names:
        report(parameter, f'field "{name}" is not in {what} (fields: {names(schema)})')
        return None
    return schema.field(name)


def is_new(schema: pa.Schema, name: str, parameter: str, report: Report) -> bool:
    """Return whether NAME is free in schema, reporting when it is not."""
    if name in schema.names:
        report(parameter, f'field "{name}" already exists in the input; rename it first')
        return False
    return True


def dataset_of(inputs: dict[str, Output], key: str, report: Report) -> pa.Schema | None:
    """Return the schema of a dataset input, or None (reported when it is no dataset of known fields)."""
    out = inputs.get(key)
    if out is None:
        return None
    if out.kind != "dataset" or out.schema is None:
        report(key, "needs a dataset with known fields (save a job's output and read it with a dataset node)")
        return None
    return out.schema


def _catalog_name(name: str) -> str:
    """Check a name a run gives a catalog entry by the catalog's own rule: at validation, not when the run gets there."""
    from ...catalog.storage import check_name
    from ...errors import BadRequest

    try:
        return check_name(name)
    except BadRequest as err:
        raise PydanticCustomError("catalog_name", err.message) from None


CatalogName = Annotated[str, AfterValidator(_catalog_name)]
