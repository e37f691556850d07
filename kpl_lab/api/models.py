"""Models: versions with their files and lineage."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from .base import Body
from .catalog import CatalogVersion, Name


class ModelVersion(CatalogVersion):
    """A model version: its files and the aliases that point at it."""

    files: list[str]
    aliases: list[str] = Field(default_factory=list, description="aliases resolving to it: NAME@ALIAS")


class Model(Body):
    """A model with its versions, oldest first."""

    name: str
    description: str
    created: datetime | None
    versions: list[ModelVersion]
    aliases: dict[str, str] = Field(default_factory=dict, description="alias -> version")


class ModelList(Body):
    """The models of a project."""

    models: list[Model]


class AliasRequest(BaseModel):
    """Where an alias should point."""

    model_config = ConfigDict(extra="forbid")

    version: Name | None = Field(
        default=None, description="the version (or a unique prefix); default: the latest"
    )


class Tensor(Body):
    """An input or output of a graph."""

    name: str
    shape: list[int | str] = Field(description="dimensions; a name for a dynamic one (e.g. batch)")
    dtype: str


class Layer(Body):
    """One layer (PyTorch) or node (ONNX) with the parameters it holds."""

    name: str
    type: str = Field(description="op type (ONNX), module type (TorchScript) or a guess from weight shapes")
    parameters: int
    shapes: dict[str, list[int]] | None = Field(default=None, description="state dicts: tensor -> shape")


class ModelFile(Body):
    """One file of a model version and, for ONNX and PyTorch files, its structure."""

    path: str
    size_bytes: int
    format: str = Field(description="onnx, torchscript, pytorch state dict, or file")
    error: str | None = Field(default=None, description="why the structure could not be read")
    opset: int | None = None
    parameters: int | None = None
    inputs: list[Tensor] = Field(default_factory=list)
    outputs: list[Tensor] = Field(default_factory=list)
    op_counts: dict[str, int] = Field(default_factory=dict)
    layers: list[Layer] = Field(default_factory=list)
    layers_total: int = 0
    not_run: list[str] = Field(
        default_factory=list, description="code the file asks to run on loading (never run here)"
    )
    classes: list[str] = Field(
        default_factory=list, description="the classes a pickled Python object names (never loaded)"
    )


class ModelStructure(Body):
    """The structure view of a model version: each file with layers, parameter counts and shapes."""

    ref: str
    files: list[ModelFile]
