"""The model, data handling and mIoU shared by train.py, test.py and infer.py."""

from __future__ import annotations

import io
import os

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from kpl_dataset import ReadOnlyDataset, list_parts

MODEL_FILE = "model.pt"
IGNORE_INDEX = 255  # Pascal VOC marks object borders with 255: they count for nothing


def conv_block(c_in: int, c_out: int) -> nn.Sequential:
    """Two 3x3 convolutions with batch norm and ReLU."""
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, padding=1, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
        nn.Conv2d(c_out, c_out, 3, padding=1, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
    )


class TinyUNet(nn.Module):
    """A U-Net behind a stride-2 stem: the work runs at half resolution, the 1/16 level sees whole shapes."""

    def __init__(self, num_classes: int, width: int = 16):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
        )
        self.down1 = conv_block(width, width)
        self.down2 = conv_block(width, width * 2)
        self.down3 = conv_block(width * 2, width * 4)
        self.bottom = conv_block(width * 4, width * 4)
        self.up3 = conv_block(width * 8, width * 2)
        self.up2 = conv_block(width * 4, width)
        self.up1 = conv_block(width * 2, width)
        self.classify = nn.Conv2d(width, num_classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d1 = self.down1(self.stem(x))
        d2 = self.down2(F.max_pool2d(d1, 2))
        d3 = self.down3(F.max_pool2d(d2, 2))
        bottom = self.bottom(F.max_pool2d(d3, 2))
        u3 = self.up3(torch.cat([F.interpolate(bottom, scale_factor=2.0), d3], dim=1))
        u2 = self.up2(torch.cat([F.interpolate(u3, scale_factor=2.0), d2], dim=1))
        u1 = self.up1(torch.cat([F.interpolate(u2, scale_factor=2.0), d1], dim=1))
        return F.interpolate(self.classify(u1), scale_factor=2.0, mode="bilinear", align_corners=False)


def check_image_size(image_size: int) -> int:
    """Return image_size if the U-Net can take it (a multiple of 16), else raise."""
    if image_size < 16 or image_size % 16:
        raise ValueError(f"parameter image_size must be a positive multiple of 16, got {image_size}")
    return image_size


def decode_image(content: bytes, image_size: int) -> tuple[np.ndarray, tuple[int, int]]:
    """Decode an image to a float32 RGB array (3, size, size) in [0, 1]; also return its (height, width)."""
    image = Image.open(io.BytesIO(content)).convert("RGB")
    original = (image.height, image.width)
    image = image.resize((image_size, image_size), Image.Resampling.BILINEAR)
    return np.asarray(image, dtype=np.float32).transpose(2, 0, 1) / 255.0, original


def decode_mask(content: bytes, image_size: int | None, num_classes: int, where: str) -> np.ndarray:
    """Decode a mask PNG of class indices (resized by nearest neighbour when image_size is given)."""
    try:
        image = Image.open(io.BytesIO(content))
        image.load()
    except Exception as error:
        raise ValueError(f"{where}: field mask is not a readable image ({error})") from None
    if image.mode not in ("P", "L"):
        raise ValueError(
            f"{where}: mask must be a palette or grayscale PNG of class indices, got mode {image.mode}"
        )
    if image_size is not None:
        image = image.resize((image_size, image_size), Image.Resampling.NEAREST)
    mask = np.asarray(image, dtype=np.int64)
    bad = (mask >= num_classes) & (mask != IGNORE_INDEX)
    if bad.any():
        raise ValueError(
            f"{where}: mask has class index {int(mask[bad].max())}, but there are only {num_classes} classes"
        )
    return mask


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


def class_names_of(parameter_classes: list, data_path: str, part: str | None) -> list[str]:
    """Return the class names: the parameter when set, else the dataset's meta `classes`."""
    if parameter_classes:
        return [str(name) for name in parameter_classes]
    reader = ReadOnlyDataset(data_path, part)
    try:
        meta = reader.get_meta_db()
        names = meta.get("classes") if meta.has("classes") else None
    finally:
        reader.close()
    if not names:
        raise ValueError(
            f"{data_path}: the dataset's meta db has no `classes`; set parameter classes "
            "(class names in mask index order, background first)"
        )
    return [str(name) for name in names]


def to_tensors(
    records: list[dict], image_size: int, num_classes: int, part: str | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack the images and masks of segmentation records."""
    images, masks = [], []
    for index, record in enumerate(records):
        where = f"part {part or 'default'} record {index} ({record.get('path', '?')})"
        if "mask" not in record:
            raise ValueError(f"{where}: no field mask (segmentation records need path, content, mask)")
        images.append(decode_image(record["content"], image_size)[0])
        masks.append(decode_mask(record["mask"], image_size, num_classes, where))
    return torch.from_numpy(np.stack(images)), torch.from_numpy(np.stack(masks))


def confusion(predicted: torch.Tensor, target: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Return the num_classes x num_classes confusion matrix (rows: truth), ignoring IGNORE_INDEX."""
    keep = target != IGNORE_INDEX
    pairs = target[keep] * num_classes + predicted[keep]
    return torch.bincount(pairs, minlength=num_classes * num_classes).reshape(num_classes, num_classes)


def iou_per_class(matrix: torch.Tensor) -> list[float]:
    """Return each class's IoU; NaN for a class neither present nor predicted."""
    matrix = matrix.double()
    hits = matrix.diag()
    union = matrix.sum(0) + matrix.sum(1) - hits
    return [float("nan") if u == 0 else float(h / u) for h, u in zip(hits, union, strict=True)]


def mean_iou(matrix: torch.Tensor) -> float:
    """Return the mean IoU over the classes that occur (in truth or prediction)."""
    values = [v for v in iou_per_class(matrix) if v == v]
    return sum(values) / len(values) if values else float("nan")


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


def build_model(state: dict) -> TinyUNet:
    """Rebuild the model stored in a checkpoint."""
    model = TinyUNet(len(state["class_names"]), state["width"])
    model.load_state_dict(state["model"])
    model.eval()
    return model


@torch.no_grad()
def predict(model: nn.Module, images: torch.Tensor, batch_size: int) -> torch.Tensor:
    """Return the class index of every pixel for a stack of images."""
    model.eval()
    return torch.cat(
        [
            model(images[start : start + batch_size]).argmax(dim=1)
            for start in range(0, len(images), batch_size)
        ]
    )


@torch.no_grad()
def segment(model: nn.Module, image: np.ndarray, original: tuple[int, int]) -> np.ndarray:
    """Return the class map of one decoded image at its original (height, width)."""
    model.eval()
    logits = model(torch.from_numpy(image).unsqueeze(0))
    if tuple(logits.shape[-2:]) != original:
        logits = F.interpolate(logits, size=original, mode="bilinear", align_corners=False)
    return logits.argmax(dim=1)[0].numpy().astype(np.uint8)


def palette() -> list[int]:
    """Return the Pascal VOC colour palette (class i gets a fixed, distinct colour)."""
    colours = []
    for index in range(256):
        r = g = b = 0
        value = index
        for shift in range(7, -1, -1):
            r |= (value & 1) << shift
            g |= ((value >> 1) & 1) << shift
            b |= ((value >> 2) & 1) << shift
            value >>= 3
        colours += [r, g, b]
    return colours


def mask_png(class_map: np.ndarray) -> bytes:
    """Encode a class map as a palette PNG (pixel value = class index)."""
    image = Image.fromarray(class_map.astype(np.uint8), mode="P")
    image.putpalette(palette())
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()
