"""Fixtures of the annotation tests: a platform holding a small image dataset with train and test parts."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image

from kpl_dataset import BasicType, WriteOnlyDataset
from kpl_lab.api.annotation import LabelSchemaRequest, TaskKind, TaskRequest

RECORD_TYPE = {
    "path": BasicType.String,
    "contentType": BasicType.String,
    "content": BasicType.ByteArray,
    "text": BasicType.String,
}
COLOURS = [(200, 30, 30), (30, 200, 30), (30, 30, 200), (200, 200, 30), (30, 200, 200), (200, 30, 200)]


def png(colour, size=(16, 12)) -> bytes:
    """Return a small PNG image."""
    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, format="PNG")
    return out.getvalue()


def write_images(folder: Path, parts: dict[str, int]) -> Path:
    """Write a kpl-dataset of coloured PNGs (with a `text` field) with the given parts and record counts."""
    number = 0
    for part, count in parts.items():
        with WriteOnlyDataset(str(folder), part, RECORD_TYPE) as writer:
            for _ in range(count):
                writer.write(
                    {
                        "path": f"{part}/img{number}.png",
                        "contentType": "image/png",
                        "content": png(COLOURS[number % len(COLOURS)]),
                        "text": f"sentence number {number}",
                    }
                )
                number += 1
    return folder


@pytest.fixture
def images(platform, tmp_path):
    """Return the ref of dataset `images`: parts train (6 records) and test (4)."""
    row = platform.catalog.add_dataset(
        "default", "images", write_images(tmp_path / "images", {"train": 6, "test": 4})
    )
    return row.ref


def task_request(name="colours", kind=TaskKind.image_class, **more) -> TaskRequest:
    """Return a task request on `images` with classes red/green/blue (red has dark and light)."""
    schema = more.pop(
        "label_schema",
        LabelSchemaRequest(
            classes=[{"name": "red", "children": ["dark", "light"]}, {"name": "green"}, {"name": "blue"}]
        ),
    )
    return TaskRequest(name=name, dataset="images", kind=kind, label_schema=schema, **more)
