"""Convert labelme JSON annotations (shapes) into detection records with polygons."""

from __future__ import annotations

import base64
import binascii
import math
import os
import posixpath
from typing import Any

from kpl_dataset import BasicType
from kpl_dataset._progress import Progress
from kpl_dataset.importers.archive import open_source
from kpl_dataset.importers.coco import load_json
from kpl_dataset.importers.output import DatasetOutput
from kpl_dataset.importers.raw import content_type
from kpl_dataset.importers.safety import ImportFailed, Limits, UnsafeEntry

LABELME_TYPE = {
    "path": BasicType.String,
    "contentType": BasicType.String,
    "content": BasicType.ByteArray,
    "width": BasicType.Int,
    "height": BasicType.Int,
    "object": [
        {
            "name": BasicType.String,
            "shape_type": BasicType.String,
            "xmin": BasicType.Int,
            "ymin": BasicType.Int,
            "xmax": BasicType.Int,
            "ymax": BasicType.Int,
            "difficult": BasicType.Int,
            "points": [[BasicType.Float]],
        }
    ],
}


def _points(shape: Any, where: str) -> list[list[float]]:
    points = shape.get("points") if isinstance(shape, dict) else None
    if not isinstance(points, list) or not points:
        raise ImportFailed(f"{where}: 'points' missing or empty")
    out = []
    for j, point in enumerate(points):
        if (
            not isinstance(point, list)
            or len(point) != 2
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in point)
        ):
            raise ImportFailed(f"{where}: points[{j}] must be [x, y], got {point!r}")
        out.append([float(point[0]), float(point[1])])
    return out


def shape_object(shape: Any, where: str) -> dict:
    """Turn one labelme shape into an object with its bounding box and points."""
    points = _points(shape, where)
    kind = str(shape.get("shape_type") or "polygon")
    if kind == "circle":
        if len(points) != 2:
            raise ImportFailed(f"{where}: a circle needs 2 points (centre, edge), got {len(points)}")
        (cx, cy), (ex, ey) = points
        r = math.hypot(ex - cx, ey - cy)
        xs, ys = [cx - r, cx + r], [cy - r, cy + r]
    else:
        xs, ys = [p[0] for p in points], [p[1] for p in points]
    return {
        "name": str(shape.get("label", "")),
        "shape_type": kind,
        "xmin": round(min(xs)),
        "ymin": round(min(ys)),
        "xmax": round(max(xs)),
        "ymax": round(max(ys)),
        "difficult": int(bool(shape.get("difficult", False))),
        "points": points,
    }


def _image_path(json_path: str, image_path: str) -> str:
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(json_path), image_path.replace("\\", "/")))
    if joined.startswith("../") or joined == ".." or posixpath.isabs(joined):
        raise UnsafeEntry(f"{json_path!r}: imagePath {image_path!r} points outside the upload")
    return joined


def import_labelme(
    src: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    part: str | None = None,
    limits: Limits | None = None,
    quiet: bool = True,
) -> dict[str, int]:
    """Write one record per labelme JSON of SRC, its image read beside it or from imageData."""
    with open_source(src, limits) as source:
        jsons = [e for e in source.entries if e.path.lower().endswith(".json")]
        with DatasetOutput(dest) as out, Progress("labelme", len(jsons), quiet=quiet) as progress:
            out.part(part, LABELME_TYPE)
            for entry in jsons:
                doc = load_json(source, entry)
                progress.update()
                if not isinstance(doc, dict) or not isinstance(doc.get("shapes"), list):
                    continue
                image_path = doc.get("imagePath")
                if not isinstance(image_path, str) or not image_path:
                    raise ImportFailed(f"{entry.path}: 'imagePath' missing")
                path = _image_path(entry.path, image_path)
                image = source.find(path)
                if image is not None:
                    content = source.content(image)
                elif isinstance(doc.get("imageData"), str):
                    try:
                        content = base64.b64decode(doc["imageData"], validate=True)
                    except binascii.Error:
                        raise ImportFailed(f"{entry.path}: 'imageData' is not valid base64") from None
                else:
                    raise ImportFailed(f"{entry.path}: image {path} not found and no imageData")
                objects = [shape_object(s, f"{entry.path}: shapes[{i}]") for i, s in enumerate(doc["shapes"])]
                out.write(
                    part,
                    {
                        "path": path,
                        "contentType": content_type(path),
                        "content": content,
                        "width": int(doc.get("imageWidth") or 0),
                        "height": int(doc.get("imageHeight") or 0),
                        "object": objects,
                    },
                )
            if not sum(out.counts.values()):
                raise ImportFailed(f"{src}: no labelme JSON (with 'shapes') found")
            return out.counts
