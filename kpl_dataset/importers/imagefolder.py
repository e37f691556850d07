"""Convert one-folder-per-class image trees into classification records."""

from __future__ import annotations

import os
import posixpath
import random

from kpl_dataset import BasicType
from kpl_dataset._progress import Progress
from kpl_dataset.importers.archive import Entry, open_source
from kpl_dataset.importers.output import DatasetOutput
from kpl_dataset.importers.raw import content_type
from kpl_dataset.importers.safety import ImportFailed, Limits

CLASSIFICATION_TYPE = {
    "path": BasicType.String,
    "contentType": BasicType.String,
    "content": BasicType.ByteArray,
    "class_name": BasicType.String,
    "file_name": BasicType.String,
    "class_id": BasicType.Int,
}


def parse_split(text: str) -> dict[str, float]:
    """Parse 'test=0.2' or 'val=0.1,test=0.2' into part fractions; the rest goes to train."""
    fractions: dict[str, float] = {}
    for item in text.split(","):
        name, sep, value = item.partition("=")
        name = name.strip()
        try:
            fraction = float(value)
        except ValueError:
            fraction = -1.0
        if not sep or not name or not 0 < fraction < 1:
            raise ImportFailed(
                f"--split {text!r}: expected NAME=FRACTION with 0 < FRACTION < 1, got {item!r}"
            )
        if name == "train" or name in fractions:
            raise ImportFailed(f"--split {text!r}: part {name!r} named twice (train takes the rest)")
        fractions[name] = fraction
    if sum(fractions.values()) >= 1:
        raise ImportFailed(f"--split {text!r}: fractions add up to 1 or more, nothing left for train")
    return fractions


def class_images(entries: list[Entry]) -> tuple[dict[str, list[Entry]], int]:
    """Group image entries by class folder; return them and how many files were skipped."""
    images = [e for e in entries if content_type(e.path).startswith("image/")]
    skipped = len(entries) - len(images)
    # A zip of the dataset folder itself has one extra top folder: look through it.
    tops = {e.path.split("/")[0] for e in images}
    strip = len(tops) == 1 and any(e.path.count("/") >= 2 for e in images)
    classes: dict[str, list[Entry]] = {}
    for e in images:
        parts = e.path.split("/")[1 if strip else 0 :]
        if len(parts) < 2:
            skipped += 1
            continue
        classes.setdefault(parts[0], []).append(e)
    return classes, skipped


def assign_parts(
    classes: dict[str, list[Entry]], split: dict[str, float] | None, seed: int
) -> dict[str | None, list[tuple[Entry, str]]]:
    """Deal each class's images into parts (stratified, deterministic for SEED)."""
    if not split:
        return {None: [(e, name) for name in sorted(classes) for e in classes[name]]}
    parts: dict[str | None, list[tuple[Entry, str]]] = {"train": [], **{name: [] for name in split}}
    rng = random.Random(seed)
    for name in sorted(classes):
        items = list(classes[name])
        rng.shuffle(items)
        start = 0
        for part, fraction in split.items():
            count = round(len(items) * fraction)
            parts[part].extend((e, name) for e in items[start : start + count])
            start += count
        parts["train"].extend((e, name) for e in items[start:])
    for records in parts.values():
        records.sort(key=lambda pair: pair[0].path)
    return parts


def import_imagefolder(
    src: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    part: str | None = None,
    split: dict[str, float] | None = None,
    seed: int = 0,
    limits: Limits | None = None,
    quiet: bool = True,
) -> dict[str, int]:
    """Write one classification record per image of SRC; class ids follow sorted class names."""
    if part is not None and split:
        raise ImportFailed("--part and --split cannot be used together")
    with open_source(src, limits) as source:
        classes, _ = class_images(source.entries)
        if not classes:
            raise ImportFailed(f"{src}: no images in class folders (expected CLASS/IMAGE files)")
        ids = {name: i for i, name in enumerate(sorted(classes))}
        parts = assign_parts(classes, split, seed)
        total = sum(len(v) for v in parts.values())
        with DatasetOutput(dest) as out, Progress("imagefolder", total, quiet=quiet) as progress:
            for name, records in parts.items():
                name = name or part
                out.part(name, CLASSIFICATION_TYPE, {"classes": sorted(classes)})
                for entry, class_name in records:
                    out.write(
                        name,
                        {
                            "path": entry.path,
                            "contentType": content_type(entry.path),
                            "content": source.content(entry),
                            "class_name": class_name,
                            "file_name": posixpath.splitext(posixpath.basename(entry.path))[0],
                            "class_id": ids[class_name],
                        },
                    )
                    progress.update()
            return out.counts
