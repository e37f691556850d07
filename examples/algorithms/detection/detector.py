"""The CenterNet-style model, its targets and decoding, and data handling shared by train, test and infer.

Each object is a peak in a per-class heatmap on a grid of stride 4, plus its box size and the
sub-cell offset of its centre regressed at that peak. Boxes are Pascal VOC style: pixel
coordinates with xmax/ymax inclusive, so a box's width is xmax - xmin + 1.
"""

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
STRIDE = 4
BOX_FIELDS = ("xmin", "ymin", "xmax", "ymax")


def conv(c_in: int, c_out: int, stride: int = 1) -> nn.Sequential:
    """A 3x3 convolution with batch norm and ReLU."""
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
    )


class TinyCenterNet(nn.Module):
    """Downsample to 1/16 for context, come back to 1/4 with skips, predict heatmaps and boxes there."""

    def __init__(self, num_classes: int, width: int = 16):
        super().__init__()
        w = width
        self.down1 = conv(3, w, 2)
        self.down2 = nn.Sequential(conv(w, 2 * w, 2), conv(2 * w, 2 * w))
        self.down3 = nn.Sequential(conv(2 * w, 4 * w, 2), conv(4 * w, 4 * w))
        self.down4 = nn.Sequential(conv(4 * w, 4 * w, 2), conv(4 * w, 4 * w))
        self.up3 = conv(8 * w, 4 * w)
        self.up2 = conv(6 * w, 2 * w)
        self.heatmap = nn.Sequential(conv(2 * w, 2 * w), nn.Conv2d(2 * w, num_classes, 1))
        self.box = nn.Sequential(conv(2 * w, 2 * w), nn.Conv2d(2 * w, 4, 1))
        # start from a low prior (0.1) so the many empty cells do not swamp the first steps
        nn.init.constant_(self.heatmap[-1].bias, -2.19)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        d2 = self.down2(self.down1(x))
        d3 = self.down3(d2)
        d4 = self.down4(d3)
        u3 = self.up3(torch.cat([F.interpolate(d4, scale_factor=2.0), d3], dim=1))
        u2 = self.up2(torch.cat([F.interpolate(u3, scale_factor=2.0), d2], dim=1))
        return self.heatmap(u2), self.box(u2)


def check_image_size(image_size: int) -> int:
    """Return image_size if the network can take it (a multiple of 16), else raise."""
    if image_size < 16 or image_size % 16:
        raise ValueError(f"parameter image_size must be a positive multiple of 16, got {image_size}")
    return image_size


def decode_image(content: bytes, image_size: int) -> tuple[np.ndarray, tuple[int, int]]:
    """Decode an image to a float32 RGB array (3, size, size) in [0, 1]; also return its (height, width)."""
    image = Image.open(io.BytesIO(content)).convert("RGB")
    original = (image.height, image.width)
    image = image.resize((image_size, image_size), Image.Resampling.BILINEAR)
    return np.asarray(image, dtype=np.float32).transpose(2, 0, 1) / 255.0, original


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


def class_names_of(
    parameter_classes: list, data_path: str, part: str | None, records: list[dict]
) -> list[str]:
    """Return the class names: the parameter when set, else the dataset's meta `classes`, else the names found."""
    if parameter_classes:
        return [str(name) for name in parameter_classes]
    reader = ReadOnlyDataset(data_path, part)
    try:
        meta = reader.get_meta_db()
        names = meta.get("classes") if meta.has("classes") else None
    finally:
        reader.close()
    if names:
        return [str(name) for name in names]
    return sorted({obj["name"] for record in records for obj in record.get("object", [])})


def checked_objects(records: list[dict], class_names: list[str], part: str | None) -> list[list[dict]]:
    """Return each record's objects, raising a clear error for a missing field, unknown class or bad box."""
    known = set(class_names)
    result = []
    for index, record in enumerate(records):
        where = f"part {part or 'default'} record {index} ({record.get('path', '?')})"
        if "object" not in record:
            raise ValueError(f"{where}: no field object (detection records need path, content, object)")
        for number, obj in enumerate(record["object"]):
            if obj["name"] not in known:
                raise ValueError(
                    f"{where} object {number}: class {obj['name']!r} is not one of {class_names}"
                )
            if obj["xmax"] < obj["xmin"] or obj["ymax"] < obj["ymin"]:
                raise ValueError(f"{where} object {number}: box {[obj[k] for k in BOX_FIELDS]} has max < min")
        result.append(record["object"])
    return result


def make_targets(
    objects: list[dict], class_names: list[str], original: tuple[int, int], image_size: int, flip: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (heatmap C x G x G, box targets 4 x G x G, mask G x G of object centres) for one image."""
    grid = image_size // STRIDE
    heatmap = np.zeros((len(class_names), grid, grid), dtype=np.float32)
    boxes = np.zeros((4, grid, grid), dtype=np.float32)
    centres = np.zeros((grid, grid), dtype=np.float32)
    sy, sx = image_size / original[0], image_size / original[1]
    ys, xs = np.mgrid[0:grid, 0:grid].astype(np.float32)
    for obj in objects:
        if obj.get("difficult", 0):
            continue  # VOC's difficult objects are neither taught nor scored
        xmin, xmax = obj["xmin"] * sx, (obj["xmax"] + 1) * sx
        if flip:
            xmin, xmax = image_size - xmax, image_size - xmin
        ymin, ymax = obj["ymin"] * sy, (obj["ymax"] + 1) * sy
        cx, cy = (xmin + xmax) / 2 / STRIDE, (ymin + ymax) / 2 / STRIDE
        w, h = (xmax - xmin) / STRIDE, (ymax - ymin) / STRIDE
        ix, iy = min(int(cx), grid - 1), min(int(cy), grid - 1)
        sigma = max(0.5, min(w, h) / 6)
        c = class_names.index(obj["name"])
        blob = np.exp(-((xs - ix) ** 2 + (ys - iy) ** 2) / (2 * sigma * sigma))
        heatmap[c] = np.maximum(heatmap[c], blob)
        heatmap[c, iy, ix] = 1.0
        boxes[:, iy, ix] = (w, h, cx - ix, cy - iy)
        centres[iy, ix] = 1.0
    return heatmap, boxes, centres


def focal_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """CenterNet's penalty-reduced focal loss, averaged over the objects."""
    p = torch.sigmoid(logits).clamp(1e-4, 1 - 1e-4)
    positive = target.eq(1).float()
    positive_loss = torch.log(p) * (1 - p) ** 2 * positive
    negative_loss = torch.log(1 - p) * p**2 * (1 - target) ** 4 * (1 - positive)
    return -(positive_loss.sum() + negative_loss.sum()) / positive.sum().clamp(min=1)


def box_loss(predicted: torch.Tensor, target: torch.Tensor, centres: torch.Tensor) -> torch.Tensor:
    """L1 loss of size (weighted 0.1, as CenterNet) and offset at the object centres."""
    weight = torch.tensor([0.1, 0.1, 1.0, 1.0]).view(1, 4, 1, 1)
    error = (predicted - target).abs() * weight * centres.unsqueeze(1)
    return error.sum() / centres.sum().clamp(min=1)


@torch.no_grad()
def detect(
    model: nn.Module, images: torch.Tensor, max_detections: int, score_threshold: float
) -> list[list[tuple[int, float, tuple[float, float, float, float]]]]:
    """Return per image the (class id, score, box) of its peaks, boxes in the input's pixels."""
    model.eval()
    heat_logits, box = model(images)
    heat = torch.sigmoid(heat_logits)
    peaks = heat * (F.max_pool2d(heat, 3, stride=1, padding=1) == heat)  # a 3x3 NMS on the heatmap
    batch, classes, grid, _ = heat.shape
    scores, flat = peaks.reshape(batch, -1).topk(min(max_detections, classes * grid * grid))
    results = []
    for b in range(batch):
        found = []
        for score, index in zip(scores[b].tolist(), flat[b].tolist(), strict=True):
            if score < score_threshold:
                break
            c, cell = divmod(index, grid * grid)
            iy, ix = divmod(cell, grid)
            w, h, ox, oy = box[b, :, iy, ix].tolist()
            cx, cy = (ix + ox) * STRIDE, (iy + oy) * STRIDE
            w, h = max(w, 0.0) * STRIDE, max(h, 0.0) * STRIDE
            found.append((c, score, (cx - w / 2, cy - h / 2, cx + w / 2 - 1, cy + h / 2 - 1)))
        results.append(found)
    return results


def to_original(
    box: tuple[float, float, float, float], original: tuple[int, int], image_size: int
) -> tuple[float, float, float, float]:
    """Scale a box from the network's input size back to the image's own (height, width)."""
    sy, sx = original[0] / image_size, original[1] / image_size
    xmin, ymin, xmax, ymax = box
    return (xmin * sx, ymin * sy, (xmax + 1) * sx - 1, (ymax + 1) * sy - 1)


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


def build_model(state: dict) -> TinyCenterNet:
    """Rebuild the model stored in a checkpoint."""
    model = TinyCenterNet(len(state["class_names"]), state["width"])
    model.load_state_dict(state["model"])
    model.eval()
    return model
