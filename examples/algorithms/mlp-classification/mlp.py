"""The model and data handling shared by train.py, test.py, infer.py and deploy.py: numpy only.

A multilayer perceptron with one hidden layer (ReLU) and a softmax output, trained with Adam
on mini-batches. The model folder holds `model.npz` (the weights, named as a PyTorch state dict
would name them: `hidden.weight` is out x in) and `model.json` (classes, image size, epoch);
`optimizer.npz` keeps Adam's moments, so a training resumed from it goes on where it stopped.
"""

from __future__ import annotations

import io
import json
import os

import numpy as np
from PIL import Image

from kpl_dataset import ReadOnlyDataset, list_parts

MODEL_FILE = "model.npz"
META_FILE = "model.json"
OPTIMIZER_FILE = "optimizer.npz"
BETAS = (0.9, 0.999)
EPSILON = 1e-8


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


def to_arrays(records: list[dict], image_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Return the images of classification records as flat rows, and their labels."""
    images = np.stack([decode_image(record["content"], image_size).ravel() for record in records])
    labels = np.array([record.get("class_id", -1) for record in records], dtype=np.int64)
    return images, labels


def class_names_of(records: list[dict]) -> list[str]:
    """Return class names indexed by class_id (a name missing from the data becomes its id)."""
    names: dict[int, str] = {}
    for record in records:
        names.setdefault(int(record["class_id"]), str(record.get("class_name", record["class_id"])))
    return [names.get(i, str(i)) for i in range(max(names) + 1)]


def new_weights(inputs: int, hidden: int, classes: int, seed: int) -> dict[str, np.ndarray]:
    """Return freshly initialised weights (He initialisation for the ReLU layer)."""
    rng = np.random.default_rng(seed)
    return {
        "hidden.weight": (rng.standard_normal((hidden, inputs)) * np.sqrt(2.0 / inputs)).astype(np.float32),
        "hidden.bias": np.zeros(hidden, dtype=np.float32),
        "output.weight": (rng.standard_normal((classes, hidden)) * np.sqrt(1.0 / hidden)).astype(np.float32),
        "output.bias": np.zeros(classes, dtype=np.float32),
    }


def logits(weights: dict[str, np.ndarray], images: np.ndarray) -> np.ndarray:
    """Return the class scores of a batch of flat images."""
    hidden = np.maximum(images @ weights["hidden.weight"].T + weights["hidden.bias"], 0.0)
    return hidden @ weights["output.weight"].T + weights["output.bias"]


def softmax(scores: np.ndarray) -> np.ndarray:
    """Return the softmax of each row."""
    shifted = np.exp(scores - scores.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def loss_and_gradients(
    weights: dict[str, np.ndarray], images: np.ndarray, labels: np.ndarray, weight_decay: float
) -> tuple[float, np.ndarray, dict[str, np.ndarray]]:
    """Return the mean cross-entropy of a batch, its class scores, and the gradients of the weights."""
    pre = images @ weights["hidden.weight"].T + weights["hidden.bias"]
    hidden = np.maximum(pre, 0.0)
    scores = hidden @ weights["output.weight"].T + weights["output.bias"]
    probabilities = softmax(scores)
    rows = np.arange(len(labels))
    loss = float(-np.log(probabilities[rows, labels] + 1e-12).mean())
    d_scores = probabilities
    d_scores[rows, labels] -= 1.0
    d_scores /= len(labels)
    d_hidden = (d_scores @ weights["output.weight"]) * (pre > 0)
    gradients = {
        "output.weight": d_scores.T @ hidden,
        "output.bias": d_scores.sum(axis=0),
        "hidden.weight": d_hidden.T @ images,
        "hidden.bias": d_hidden.sum(axis=0),
    }
    for name in ("output.weight", "hidden.weight"):  # L2 on the weights, not the biases
        gradients[name] += weight_decay * weights[name]
    return loss, scores, gradients


class Adam:
    """Adam's update of a dict of arrays, with its moments kept for a resume."""

    def __init__(self, weights: dict[str, np.ndarray], state: dict[str, np.ndarray] | None = None):
        self.step = int(state["step"]) if state else 0
        self.first = {n: state[f"first.{n}"] if state else np.zeros_like(w) for n, w in weights.items()}
        self.second = {n: state[f"second.{n}"] if state else np.zeros_like(w) for n, w in weights.items()}

    def update(self, weights: dict[str, np.ndarray], gradients: dict[str, np.ndarray], lr: float) -> None:
        """Move every weight one step against its gradient."""
        self.step += 1
        beta1, beta2 = BETAS
        for name, gradient in gradients.items():
            self.first[name] = beta1 * self.first[name] + (1 - beta1) * gradient
            self.second[name] = beta2 * self.second[name] + (1 - beta2) * gradient**2
            first = self.first[name] / (1 - beta1**self.step)
            second = self.second[name] / (1 - beta2**self.step)
            weights[name] -= (lr * first / (np.sqrt(second) + EPSILON)).astype(np.float32)

    def state(self) -> dict[str, np.ndarray]:
        """Return the moments and the step count, to save."""
        state = {"step": np.array(self.step)}
        state |= {f"first.{n}": a for n, a in self.first.items()}
        state |= {f"second.{n}": a for n, a in self.second.items()}
        return state


def _save_atomic(path: str, write) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as file:
        write(file)
    os.replace(tmp, path)


def save_model(folder: str, weights: dict, meta: dict, optimizer: Adam | None = None) -> str:
    """Write model.npz, model.json (and optimizer.npz) atomically: a crash never leaves a torn model."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, MODEL_FILE)
    _save_atomic(path, lambda file: np.savez(file, **weights))
    if optimizer is not None:
        _save_atomic(os.path.join(folder, OPTIMIZER_FILE), lambda file: np.savez(file, **optimizer.state()))
    _save_atomic(
        os.path.join(folder, META_FILE), lambda file: file.write(json.dumps(meta, indent=2).encode())
    )
    return path


def load_model(folder: str) -> tuple[dict[str, np.ndarray], dict]:
    """Return the weights and the metadata of a model folder (no pickle is ever loaded)."""
    path = os.path.join(folder, MODEL_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no {MODEL_FILE} in {folder}: pass the output folder of train.py")
    with np.load(path, allow_pickle=False) as archive:
        weights = {name: archive[name] for name in archive.files}
    with open(os.path.join(folder, META_FILE)) as file:
        return weights, json.load(file)


def load_optimizer(folder: str) -> dict[str, np.ndarray] | None:
    """Return the saved Adam state of a model folder, or None."""
    path = os.path.join(folder, OPTIMIZER_FILE)
    if not os.path.isfile(path):
        return None
    with np.load(path, allow_pickle=False) as archive:
        return {name: archive[name] for name in archive.files}


def predict(weights: dict[str, np.ndarray], images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return (class ids, scores) for a stack of flat images."""
    probabilities = softmax(logits(weights, images))
    ids = probabilities.argmax(axis=1)
    return ids, probabilities[np.arange(len(ids)), ids]
