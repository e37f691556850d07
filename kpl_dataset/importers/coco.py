"""Convert COCO instances JSON plus its images into detection records."""

from __future__ import annotations

import json
import os
import posixpath
from typing import Any

from kpl_dataset import BasicType
from kpl_dataset._progress import Progress
from kpl_dataset.importers.archive import Entry, Source, open_source
from kpl_dataset.importers.output import DatasetOutput
from kpl_dataset.importers.raw import content_type
from kpl_dataset.importers.safety import ImportFailed, Limits

COCO_TYPE = {
    "path": BasicType.String,
    "contentType": BasicType.String,
    "content": BasicType.ByteArray,
    "width": BasicType.Int,
    "height": BasicType.Int,
    "object": [
        {
            "name": BasicType.String,
            "category_id": BasicType.Int,
            "xmin": BasicType.Int,
            "ymin": BasicType.Int,
            "xmax": BasicType.Int,
            "ymax": BasicType.Int,
            "difficult": BasicType.Int,
            "segmentation": [[BasicType.Float]],
        }
    ],
}


def load_json(source: Source, entry: Entry) -> Any:
    """Parse one JSON entry, naming it and the line on errors."""
    try:
        return json.loads(source.read(entry))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ImportFailed(f"{entry.path}: bad JSON: {exc}") from None


def _is_instances(doc: Any) -> bool:
    return isinstance(doc, dict) and all(isinstance(doc.get(k), list) for k in ("images", "annotations"))


def _part_name(path: str) -> str:
    stem = posixpath.splitext(posixpath.basename(path))[0]
    return stem.removeprefix("instances_") or stem


def _require(item: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(item, dict) or not isinstance(item.get(key), kind) or isinstance(item.get(key), bool):
        raise ImportFailed(f"{where}: field {key!r} missing or not {getattr(kind, '__name__', kind)}")
    return item[key]


def _objects(doc: dict, where: str) -> dict[Any, list[dict]]:
    names = {}
    for i, cat in enumerate(doc.get("categories") or []):
        names[_require(cat, "id", int, f"{where}: categories[{i}]")] = str(cat.get("name", ""))
    by_image: dict[Any, list[dict]] = {}
    for i, ann in enumerate(doc["annotations"]):
        here = f"{where}: annotations[{i}]"
        bbox = _require(ann, "bbox", list, here)
        if len(bbox) != 4 or not all(isinstance(v, (int, float)) for v in bbox):
            raise ImportFailed(f"{here}: bbox must be four numbers [x, y, width, height], got {bbox!r}")
        x, y, w, h = (float(v) for v in bbox)
        category = _require(ann, "category_id", int, here)
        if category not in names:
            raise ImportFailed(f"{here}: category_id {category} is not in categories")
        segmentation = ann.get("segmentation")
        # RLE masks (crowds) are dicts; only polygons are kept.
        polygons = (
            [[float(v) for v in poly] for poly in segmentation if isinstance(poly, list)]
            if isinstance(segmentation, list)
            else []
        )
        by_image.setdefault(_require(ann, "image_id", (int, str), here), []).append(
            {
                "name": names[category],
                "category_id": category,
                "xmin": round(x),
                "ymin": round(y),
                "xmax": round(x + w),
                "ymax": round(y + h),
                "difficult": int(ann.get("iscrowd") or 0),
                "segmentation": polygons,
            }
        )
    return by_image


def _find_image(
    source: Source, by_name: dict[str, list[Entry]], file_name: str, split: str, where: str
) -> Entry:
    wanted = file_name.replace("\\", "/").lstrip("/")
    matches = [
        e for e in by_name.get(posixpath.basename(wanted), []) if ("/" + e.path).endswith("/" + wanted)
    ]
    if len(matches) > 1:
        matches = [e for e in matches if split in e.path.split("/")] or matches
    if not matches:
        raise ImportFailed(f"{where}: image {file_name!r} not found")
    if len(matches) > 1:
        raise ImportFailed(f"{where}: image {file_name!r} is ambiguous: {[e.path for e in matches]}")
    return matches[0]


def import_coco(
    src: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    part: str | None = None,
    limits: Limits | None = None,
    quiet: bool = True,
) -> dict[str, int]:
    """Write one detection record per COCO image; one part per instances file."""
    with open_source(src, limits) as source:
        candidates = [e for e in source.entries if e.path.lower().endswith(".json")]
        preferred = [
            e
            for e in candidates
            if posixpath.basename(e.path).startswith("instances") or "annotations" in e.path
        ]
        docs = [
            (e, doc)
            for e in (preferred or candidates)
            for doc in [load_json(source, e)]
            if _is_instances(doc)
        ]
        if not docs:
            raise ImportFailed(f"{src}: no COCO instances JSON (with 'images' and 'annotations') found")
        if part is not None and len(docs) > 1:
            raise ImportFailed(f"{src}: --part needs exactly one instances JSON, found {len(docs)}")
        by_name: dict[str, list[Entry]] = {}
        for e in source.entries:
            by_name.setdefault(posixpath.basename(e.path), []).append(e)
        total = sum(len(doc["images"]) for _, doc in docs)
        with DatasetOutput(dest) as out, Progress("coco", total, quiet=quiet) as progress:
            for entry, doc in docs:
                name = part if len(docs) == 1 else _part_name(entry.path)
                split = _part_name(entry.path)
                out.part(name, COCO_TYPE)
                objects = _objects(doc, entry.path)
                for i, image in enumerate(doc["images"]):
                    here = f"{entry.path}: images[{i}]"
                    file_name = _require(image, "file_name", str, here)
                    found = _find_image(source, by_name, file_name, split, here)
                    out.write(
                        name,
                        {
                            "path": found.path,
                            "contentType": content_type(found.path),
                            "content": source.content(found),
                            "width": int(image.get("width") or 0),
                            "height": int(image.get("height") or 0),
                            "object": objects.get(image.get("id"), []),
                        },
                    )
                    progress.update()
            return out.counts
