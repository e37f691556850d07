"""Seed 001's fruit uploads, generated: VOC images with masks or XML annotations, or class folders.

The pipeline tests and benchmarks/sandbox.py register them as the datasets the shipped templates read.
"""

from __future__ import annotations

import random
import xml.etree.ElementTree as ET
from pathlib import Path

from kpl_dataset import WriteOnlyDataset

RAW_TYPE = {"path": "String", "contentType": "String", "content": "ByteArray"}


def voc_xml(stem: str, boxes: list[tuple[str, int, int, int, int, int]], size: tuple[int, int]) -> bytes:
    """Return a Pascal VOC annotation."""
    root = ET.Element("annotation")
    ET.SubElement(root, "folder").text = "fruit"
    ET.SubElement(root, "filename").text = f"{stem}.jpg"
    sz = ET.SubElement(root, "size")
    ET.SubElement(sz, "width").text = str(size[0])
    ET.SubElement(sz, "height").text = str(size[1])
    for name, x0, y0, x1, y1, difficult in boxes:
        obj = ET.SubElement(root, "object")
        ET.SubElement(obj, "name").text = name
        ET.SubElement(obj, "difficult").text = str(difficult)
        bb = ET.SubElement(obj, "bndbox")
        for tag, v in zip(("xmin", "ymin", "xmax", "ymax"), (x0, y0, x1, y1), strict=True):
            ET.SubElement(bb, tag).text = str(v)
    return ET.tostring(root)


def write_raw(folder: Path, records: list[dict], part: str = "root") -> Path:
    """Write records as an uploaded (raw) dataset folder, as one part."""
    with WriteOnlyDataset(folder, part, RAW_TYPE, batch_rows=7) as w:  # several batches on purpose
        for record in records:
            w.write(record)
    return folder


def fruit_files(kind: str, count: int, seed: int = 1) -> list[dict]:
    """Return seed 001's uploaded files for one flow: VOC images with masks or XML, or class folders."""
    rng = random.Random(seed)
    fruits = ["apple", "kiwi", "orange", "dragonfruit"]
    out = []
    for i in range(count):
        stem = f"IMG_20180129_{170000 + i}"
        image = {
            "path": f"Fruit/JPEGImages/{stem}.jpg",
            "contentType": "image/jpeg",
            "content": rng.randbytes(40),
        }
        if kind == "classification":
            fruit = fruits[i % len(fruits)]
            out.append({**image, "path": f"Fruit/{fruit}/{i}.jpg"})
            continue
        out.append(image)
        if i % 4 == 3:
            continue  # an image without annotation: its joined field is null
        if kind == "segmentation":
            out.append(
                {
                    "path": f"Fruit/SegmentationClass/{stem}.png",
                    "contentType": "image/png",
                    "content": rng.randbytes(30),
                }
            )
        else:
            boxes = [
                (
                    rng.choice(fruits),
                    rng.randint(0, 50),
                    rng.randint(0, 50),
                    rng.randint(60, 99),
                    rng.randint(60, 99),
                    rng.randint(0, 1),
                )
                for _ in range(rng.randint(0, 3))
            ]
            xml = voc_xml(stem, boxes, (100 + i, 80 + i))
            out.append(
                {"path": f"Fruit/Annotations/{stem}.xml", "contentType": "application/xml", "content": xml}
            )
    out.append({"path": "Fruit/README", "contentType": "text/plain", "content": b"no extension: no match"})
    rng.shuffle(out)
    return out
