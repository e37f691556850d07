"""The node types of pipeline files, in one registry: each one class with its parameters, checks,
how it runs and what the editors show (kpl_lab/pipelines/nodes/base.py)."""

from __future__ import annotations

from ..format import ALGORITHM_FUNCTIONS
from ..schema import PORT
from .algorithms import AlgorithmNode
from .base import (
    CATEGORIES,
    Catalog,
    NodeType,
    Params,
    PlatformNode,
    Processor,
    Relational,
    Result,
    Router,
    Step,
)
from .records import ParseAnnotation, Sample, Split, coco, labelme, voc
from .relational import LabelId, LeftJoin, RegexExtract, Rename, Select, Shuffle, Sql
from .sinks import SaveDataset, SaveModel
from .sources import DatasetNode, ModelNode

# in the order the editors list them
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
        ParseAnnotation("parse_voc", "Pascal VOC XML", voc),
        ParseAnnotation("parse_labelme", "Labelme JSON", labelme),
        ParseAnnotation("parse_coco", "COCO JSON (one image's document per record)", coco),
        Split(),
        Sample(),
        Shuffle(),
        Sql(),
        SaveDataset(),
        SaveModel(),
        *(AlgorithmNode(f) for f in ALGORITHM_FUNCTIONS),
    ]
}

__all__ = [
    "ALGORITHM_FUNCTIONS",
    "CATEGORIES",
    "NODE_TYPES",
    "PORT",
    "Catalog",
    "NodeType",
    "Params",
    "PlatformNode",
    "Processor",
    "Relational",
    "Result",
    "Router",
    "Step",
]
