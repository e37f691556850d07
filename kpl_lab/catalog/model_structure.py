"""The structure view of a model version: layers or ops, parameter counts and shapes of its files.

ONNX files are read with the `onnx` package (graph only, never executed). PyTorch files are read
as TorchScript archives or as state dicts with `torch.load(weights_only=True)`, which refuses to
unpickle arbitrary objects: an uploaded full model pickle is listed, never loaded.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from math import prod
from pathlib import Path

ONNX_SUFFIXES = (".onnx",)
TORCH_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin")
MAX_LAYERS = 500  # a structure view is for reading: very deep graphs are cut


def describe_model_files(folder: str | Path, files: list[str]) -> list[dict]:
    """Return one entry per file: path, size and, for ONNX and PyTorch files, their structure."""
    folder = Path(folder)
    described = []
    for name in files:
        path = folder / name
        entry: dict = {"path": name, "size_bytes": path.stat().st_size, "format": "file"}
        lower = name.lower()
        if lower.endswith(ONNX_SUFFIXES):
            entry |= _describe_onnx(path)
        elif lower.endswith(TORCH_SUFFIXES):
            entry |= _describe_torch(path)
        described.append(entry)
    return described


def _shape(dims) -> list[int | str]:
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims]


def _describe_onnx(path: Path) -> dict:
    try:
        import onnx
    except ImportError:
        return {"error": "install the onnx package to see the structure of ONNX files"}
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # a corrupt upload is described, not raised
        return {"format": "onnx", "error": f"cannot read the ONNX graph: {exc}"}
    graph = model.graph
    sizes = {t.name: prod(t.dims) for t in graph.initializer}
    initializers = set(sizes)

    def tensors(values) -> list[dict]:
        return [
            {
                "name": v.name,
                "shape": _shape(v.type.tensor_type.shape.dim),
                "dtype": onnx.TensorProto.DataType.Name(v.type.tensor_type.elem_type).lower(),
            }
            for v in values
            if v.name not in initializers
        ]

    layers = [
        {
            "name": node.name or node.output[0],
            "type": node.op_type,
            "parameters": sum(sizes.get(i, 0) for i in node.input),
        }
        for node in graph.node
    ]
    return {
        "format": "onnx",
        "opset": max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=None),
        "inputs": tensors(graph.input),
        "outputs": tensors(graph.output),
        "parameters": sum(sizes.values()),
        "op_counts": dict(Counter(node.op_type for node in graph.node).most_common()),
        "layers": layers[:MAX_LAYERS],
        "layers_total": len(layers),
    }


def _describe_torch(path: Path) -> dict:
    try:
        import torch
    except ImportError:
        return {"error": "install torch to see the structure of PyTorch files"}
    if _is_torchscript(path):
        try:
            module = torch.jit.load(str(path), map_location="cpu")
        except Exception as exc:
            return {"format": "torchscript", "error": f"cannot read the TorchScript archive: {exc}"}
        layers = [
            {
                "name": name or "(root)",
                "type": sub.original_name,
                "parameters": sum(p.numel() for p in sub.parameters(recurse=False)),
            }
            for name, sub in module.named_modules()
        ]
        return {
            "format": "torchscript",
            "parameters": sum(p.numel() for p in module.parameters()),
            "layers": layers[:MAX_LAYERS],
            "layers_total": len(layers),
        }
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:
        return {
            "format": "pytorch",
            "error": f"not a state dict readable without unpickling code (weights_only): {exc}",
        }
    tensors = _state_tensors(state)
    if not tensors:
        return {"format": "pytorch", "error": "no tensors found in the file"}
    layers: dict[str, dict] = {}
    for key, tensor in tensors.items():
        layer, _, kind = key.rpartition(".")
        entry = layers.setdefault(
            layer or key, {"name": layer or key, "type": "", "parameters": 0, "shapes": {}}
        )
        entry["parameters"] += tensor.numel()
        entry["shapes"][kind or key] = list(tensor.shape)
    for entry in layers.values():
        entry["type"] = _guess_layer(entry["shapes"])
    ordered = list(layers.values())
    return {
        "format": "pytorch state dict",
        "parameters": sum(t.numel() for t in tensors.values()),
        "layers": ordered[:MAX_LAYERS],
        "layers_total": len(ordered),
    }


def _is_torchscript(path: Path) -> bool:
    import zipfile

    with contextlib.suppress(OSError, zipfile.BadZipFile):
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                return any(n.split("/", 1)[-1].startswith("code/") for n in archive.namelist())
    return False


def _state_tensors(state, prefix: str = "") -> dict:
    """Return the tensors of a state dict, also inside a checkpoint dict ({"model": state_dict, ...})."""
    import torch

    found = {}
    if isinstance(state, dict):
        for key, value in state.items():
            name = f"{prefix}{key}"
            if isinstance(value, torch.Tensor):
                found[name] = value
            elif isinstance(value, dict) and not prefix:
                found |= _state_tensors(value, f"{name}.")
    return found


def _guess_layer(shapes: dict[str, list[int]]) -> str:
    """Name a layer from the shapes of its weights: what a reader recognises."""
    weight = shapes.get("weight")
    if "running_mean" in shapes:
        return "BatchNorm"
    if weight is None:
        return "tensors"
    if len(weight) == 4:
        return f"Conv2d {weight[1]}->{weight[0]} {weight[2]}x{weight[3]}"
    if len(weight) == 2:
        return f"Linear {weight[1]}->{weight[0]}"
    if len(weight) == 1:
        return "Norm"
    return f"{len(weight)}-d weight"
