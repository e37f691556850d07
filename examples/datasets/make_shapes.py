"""Write synthetic coloured shapes as a detection or segmentation kpl-dataset with `train` and `test` parts.

Runs offline and is deterministic for a given seed: each image has 1-3 shapes (circle, square,
triangle) of random colours and sizes on a noisy background, drawn with Pillow. The two tasks
use the shapes of the KPL user guide (Pascal VOC style):

- detection: `path, contentType, content, object: [{name, xmin, ymin, xmax, ymax, difficult}]`
  (boxes in pixels, max inclusive);
- segmentation: `path, contentType, content, mask` where `mask` is a palette PNG holding the
  class index of every pixel (0 background, 1 circle, 2 square, 3 triangle).

The dataset's meta db holds `classes`: the object names for detection, the mask's class names
(background first) for segmentation. The same seed gives the same images for both tasks.

    python examples/datasets/make_shapes.py data/shapes --task detection [--size 64] [--train 800] [--test 200]
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from kpl_dataset import BasicType, WriteOnlyDataset

SHAPES = ("circle", "square", "triangle")
SEGMENTATION_CLASSES = ("background", *SHAPES)
TASKS = ("detection", "segmentation")
COMMON_FIELDS = {
    "path": BasicType.String,
    "contentType": BasicType.String,
    "content": BasicType.ByteArray,
}
RECORD_TYPES = {
    "detection": {
        **COMMON_FIELDS,
        "object": [
            {
                "name": BasicType.String,
                "xmin": BasicType.Int,
                "ymin": BasicType.Int,
                "xmax": BasicType.Int,
                "ymax": BasicType.Int,
                "difficult": BasicType.Int,
            }
        ],
    },
    "segmentation": {**COMMON_FIELDS, "mask": BasicType.ByteArray},
}
# a VOC-like palette so masks are visible in an image viewer; the pixel values stay class indices
PALETTE = [0, 0, 0, 200, 40, 40, 40, 200, 40, 40, 40, 200] + [0] * (256 * 3 - 12)
PART_SEEDS = {"train": 0, "test": 1}


def draw_shape(draw: ImageDraw.ImageDraw, shape: str, box: tuple[int, int, int, int], fill) -> None:
    """Draw one shape filling the box (x0, y0, x1, y1), max inclusive."""
    x0, y0, x1, y1 = box
    if shape == "circle":
        draw.ellipse(box, fill=fill)
    elif shape == "square":
        draw.rectangle(box, fill=fill)
    else:  # an upright triangle whose corners touch the box
        draw.polygon([((x0 + x1) / 2, y0), (x1, y1), (x0, y1)], fill=fill)


def place_boxes(rng: np.random.Generator, size: int, count: int) -> list[tuple[int, int, int, int]]:
    """Return up to `count` non-overlapping square boxes inside a size x size image."""
    boxes: list[tuple[int, int, int, int]] = []
    low, high = max(8, size // 6), max(9, size * 3 // 8)
    for _ in range(count * 20):  # rejection sampling; a crowded image simply gets fewer shapes
        if len(boxes) == count:
            break
        side = int(rng.integers(low, high + 1))
        x0, y0 = (int(v) for v in rng.integers(0, size - side, size=2))
        box = (x0, y0, x0 + side - 1, y0 + side - 1)
        if all(
            box[0] > b[2] + 1 or b[0] > box[2] + 1 or box[1] > b[3] + 1 or b[1] > box[3] + 1 for b in boxes
        ):
            boxes.append(box)
    return boxes


def make_image(rng: np.random.Generator, size: int) -> tuple[Image.Image, Image.Image, list[dict]]:
    """Return (RGB image, palette mask of class indices, objects) for one random scene."""
    background = rng.integers(30, 226, size=3)
    gradient = np.linspace(-25, 25, size)[None, :, None] * rng.choice([-1, 1], size=3)
    pixels = np.broadcast_to(background + gradient, (size, size, 3))
    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), mode="RGB")
    mask = Image.new("P", (size, size), 0)
    mask.putpalette(PALETTE)
    draw, draw_mask = ImageDraw.Draw(image), ImageDraw.Draw(mask)
    objects = []
    for box in place_boxes(rng, size, int(rng.integers(1, 4))):
        class_id = int(rng.integers(len(SHAPES)))
        colour = rng.integers(0, 256, size=3)
        while np.abs(colour - background).sum() < 150:  # keep every shape visible on its background
            colour = rng.integers(0, 256, size=3)
        draw_shape(draw, SHAPES[class_id], box, tuple(int(c) for c in colour))
        draw_shape(draw_mask, SHAPES[class_id], box, class_id + 1)
        xmin, ymin, xmax, ymax = box
        objects.append(
            {"name": SHAPES[class_id], "xmin": xmin, "ymin": ymin, "xmax": xmax, "ymax": ymax, "difficult": 0}
        )
    noisy = np.asarray(image, dtype=np.float32) + rng.normal(0, 12, size=(size, size, 3))
    return Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8), mode="RGB"), mask, objects


def png_bytes(image: Image.Image) -> bytes:
    """Encode an image as PNG."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def make_shapes(
    out_dir: str | Path, task: str, size: int = 64, train: int = 800, test: int = 200, seed: int = 0
) -> dict[str, int]:
    """Write the dataset for `task` into `out_dir`; return the record count of each part."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {', '.join(TASKS)}, got {task!r}")
    if size < 32:
        raise ValueError(f"size must be at least 32 pixels, got {size}")
    counts = {"train": train, "test": test}
    writers = {part: WriteOnlyDataset(str(out_dir), part, RECORD_TYPES[task]) for part in counts}
    try:
        for part, writer in writers.items():
            rng = np.random.default_rng([seed, PART_SEEDS[part]])
            for index in range(counts[part]):
                image, mask, objects = make_image(rng, size)
                record = {
                    "path": f"shapes/{part}/{index:05d}.png",
                    "contentType": "image/png",
                    "content": png_bytes(image),
                }
                if task == "detection":
                    record["object"] = objects
                else:
                    record["mask"] = png_bytes(mask)
                writer.write(record)
    except BaseException:
        for writer in writers.values():  # never commit a half-written dataset
            writer.abort()
        raise
    classes = list(SHAPES if task == "detection" else SEGMENTATION_CLASSES)
    for part, writer in writers.items():
        meta = writer.get_meta_db()
        (meta.update if meta.has("classes") else meta.put)("classes", classes)
        writer.close()
        print(f"{part}: {counts[part]} records", file=sys.stderr)
    return counts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", help="the dataset folder to write")
    parser.add_argument("--task", choices=TASKS, required=True, help="which record shape to write")
    parser.add_argument("--size", type=int, default=64, help="side of the images in pixels (default 64)")
    parser.add_argument("--train", type=int, default=800, help="images in the train part (default 800)")
    parser.add_argument("--test", type=int, default=200, help="images in the test part (default 200)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    args = parser.parse_args(argv)
    make_shapes(args.out_dir, args.task, args.size, args.train, args.test, args.seed)


if __name__ == "__main__":
    main()
