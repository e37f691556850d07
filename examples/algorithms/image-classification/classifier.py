"""The model and data handling shared by train.py, test.py and infer.py."""

from __future__ import annotations

import io
import os

import numpy as np
import torch
from PIL import Image
from torch import nn

from kpl_dataset import ReadOnlyDataset, list_parts

MODEL_FILE = "model.pt"


class SmallCNN(nn.Module):
    """Two conv blocks and a small head: enough for digits, quick on two CPU cores."""

    def __init__(self, num_classes: int, image_size: int):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        side = image_size // 4
        self.head = nn.Sequential(
            nn.Flatten(),
            nn.Linear(32 * side * side, 128),
            nn.ReLU(),
            nn.Dropout(0.2),
            nn.Linear(128, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def decode_image(content: bytes, image_size: int) -> np.ndarray:
    """Decode an image to a float32 grayscale array in [0, 1] of image_size x image_size."""
    image = (
        Image.open(io.BytesIO(content))
        .convert("L")
        .resize((image_size, image_size), Image.Resampling.BILINEAR)
    )
    return np.asarray(image, dtype=np.float32) / 255.0


def choose_part(data_path: str, wanted: str | None) -> str | None:
    """Return `wanted` if the dataset has that part, else None (its default part)."""
    return wanted if wanted and wanted in list_parts(data_path) else None


def load_records(data_path: str, part: str | None) -> list[dict]:
    """Read every record of one part (small datasets: they fit in memory)."""
    reader = ReadOnlyDataset(data_path, part)
    try:
        return [reader[i] for i in range(len(reader))]
    finally:
        reader.close()


def to_tensors(records: list[dict], image_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack the images and labels of classification records."""
    images = np.stack([decode_image(record["content"], image_size) for record in records])
    labels = np.array([record.get("class_id", -1) for record in records], dtype=np.int64)
    return torch.from_numpy(images).unsqueeze(1), torch.from_numpy(labels)


def class_names_of(records: list[dict]) -> list[str]:
    """Return class names indexed by class_id (a name missing from the data becomes its id)."""
    names: dict[int, str] = {}
    for record in records:
        names.setdefault(int(record["class_id"]), str(record.get("class_name", record["class_id"])))
    return [names.get(i, str(i)) for i in range(max(names) + 1)]


def save_checkpoint(folder: str, state: dict) -> str:
    """Write model.pt atomically (a crash never leaves a torn checkpoint)."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, MODEL_FILE)
    tmp = path + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)
    return path


def load_checkpoint(folder: str) -> dict:
    """Read model.pt from a model folder."""
    path = os.path.join(folder, MODEL_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no {MODEL_FILE} in {folder}: pass the output folder of train.py")
    return torch.load(path, map_location="cpu", weights_only=False)


def build_model(state: dict) -> SmallCNN:
    """Rebuild the model stored in a checkpoint."""
    model = SmallCNN(len(state["class_names"]), state["image_size"])
    model.load_state_dict(state["model"])
    model.eval()
    return model


@torch.no_grad()
def predict(model: nn.Module, images: torch.Tensor, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (class ids, scores) for a stack of images."""
    model.eval()
    ids, scores = [], []
    for start in range(0, len(images), batch_size):
        probabilities = torch.softmax(model(images[start : start + batch_size]), dim=1)
        score, index = probabilities.max(dim=1)
        ids.append(index)
        scores.append(score)
    return torch.cat(ids), torch.cat(scores)


ONNX_FILE = "model.onnx"
ONNX_META_FILE = "model.json"  # what a compiled model needs besides its graph: classes, input size, target


def export_onnx(model: nn.Module, state: dict, folder: str, opset: int) -> str:
    """Export the model to folder/model.onnx (dynamic batch) with its metadata in model.json."""
    import json
    import warnings

    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, ONNX_FILE)
    example = torch.zeros(1, 1, state["image_size"], state["image_size"])
    with warnings.catch_warnings():  # the TorchScript-based exporter needs no onnxscript; it warns
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            model,
            example,
            path,
            input_names=["image"],
            output_names=["logits"],
            dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}},
            opset_version=opset,
            dynamo=False,
        )
    meta = {
        "target": "onnx",
        "runtime": "onnxruntime",
        "opset": opset,
        "class_names": state["class_names"],
        "image_size": state["image_size"],
        "input": "image: float32[batch, 1, image_size, image_size] in [0, 1]",
        "output": "logits: float32[batch, classes]",
    }
    with open(os.path.join(folder, ONNX_META_FILE), "w") as file:
        json.dump(meta, file, indent=2)
    return path


def load_predictor(folder: str, threads: int):
    """Return (logits of a float32 N x 1 x S x S batch as numpy, class names, image size) for a model folder.

    A folder with model.onnx (the output of compile.py) runs on onnxruntime; one with model.pt on PyTorch.
    """
    import json

    if os.path.isfile(os.path.join(folder, ONNX_FILE)):
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        session = onnxruntime.InferenceSession(
            os.path.join(folder, ONNX_FILE), options, providers=["CPUExecutionProvider"]
        )
        with open(os.path.join(folder, ONNX_META_FILE)) as file:
            meta = json.load(file)

        def onnx_logits(images: np.ndarray) -> np.ndarray:
            return session.run(["logits"], {"image": images.astype(np.float32)})[0]

        return onnx_logits, meta["class_names"], meta["image_size"]
    torch.set_num_threads(threads)
    state = load_checkpoint(folder)
    model = build_model(state)

    @torch.no_grad()
    def torch_logits(images: np.ndarray) -> np.ndarray:
        return model(torch.from_numpy(images)).numpy()

    return torch_logits, state["class_names"], state["image_size"]


def softmax(logits: np.ndarray) -> np.ndarray:
    """Return the softmax of each row."""
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)
