"""Dataset workflows of the catalog: import an archive, open a version's view, delete with its caches.

The REST handlers, the CLI and (through the REST API) the magics all go through these,
so a deleted version never leaves its shared readers, thumbnails or stats behind.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import BadRequest
from .storage import Storage, check_name

if TYPE_CHECKING:
    from .datasets_view import DatasetView
    from .models import DatasetVersion
    from .service import Catalog

FORMATS = ("import", "imagefolder", "voc", "coco", "labelme")
# The usual splits in the order people read them; other parts follow by name.
SPLITS = ("root", "train", "training", "val", "valid", "validation", "dev", "test", "testing")


def part_order(parts: list[str]) -> list[str]:
    """Return parts as a viewer lists them: root, train, validation, test, then the others by name."""
    rank = {name: i for i, name in enumerate(SPLITS)}
    return sorted(parts, key=lambda part: (rank.get(part.lower(), len(rank)), part))


def cache_dir(storage: Storage, project: str, name: str, version: str) -> Path:
    """Return the cache folder (thumbnails, stats) of one dataset version."""
    return storage.root / "cache" / "projects" / project / "datasets" / name / version


def check_import(form: str, part: str | None, split: str | None) -> None:
    """Refuse an unknown format, a bad part name or a split of a format that has none."""
    from kpl_dataset import KPLDatasetError
    from kpl_dataset.importers import parse_split

    if form not in FORMATS:
        raise BadRequest(f"format: {form!r} is not one of {', '.join(FORMATS)}", field="format")
    if split:
        if form != "imagefolder":
            raise BadRequest("split: only the imagefolder format splits records into parts", field="split")
        try:
            parse_split(split)
        except KPLDatasetError as error:
            raise BadRequest(f"split: {error}", field="split") from None
    if part:
        check_name(part, "part")


def import_archive(
    catalog: Catalog,
    project: str,
    name: str,
    archive: Path,
    form: str = "import",
    part: str | None = None,
    split: str | None = None,
    description: str = "",
    shown_as: str | None = None,
) -> DatasetVersion:
    """Import an archive with the hostile-safe importers and register it; nothing is left on failure."""
    from kpl_dataset import KPLDatasetError, importers

    check_name(name)
    check_import(form, part, split)
    archive = Path(archive)
    with tempfile.TemporaryDirectory(prefix="import-", dir=archive.parent) as tmp:
        dest = Path(tmp) / "dataset"
        try:
            if form == "imagefolder":
                split_of = importers.parse_split(split) if split else None
                importers.import_imagefolder(archive, dest, part, split=split_of)
            else:
                importer = {
                    "import": importers.import_raw,
                    "voc": importers.import_voc,
                    "coco": importers.import_coco,
                    "labelme": importers.import_labelme,
                }[form]
                importer(archive, dest, part)
        except KPLDatasetError as error:
            raise BadRequest(
                str(error).replace(str(archive), shown_as or archive.name), field="body"
            ) from None
        return catalog.add_dataset(project, name, dest, description)


def open_view(catalog: Catalog, project: str, name: str, version: str) -> tuple[DatasetVersion, DatasetView]:
    """Return a dataset version and the view that reads its pages, fields, thumbnails and stats."""
    from .datasets_view import DatasetView

    check_name(name)
    check_name(version, "version")
    row = catalog.get_dataset(project, f"{name}:{version}")
    view = DatasetView(catalog.path(row), cache_dir(catalog.storage, project, name, row.version), row.ref)
    return row, view


def forget(storage: Storage, project: str, refs: list[str]) -> None:
    """Drop the shared readers and the caches of deleted dataset versions."""
    from . import datasets_view

    for ref in refs:
        name, _, version = ref.partition(":")
        datasets_view.forget(storage.dataset_dir(project, name, version))
        shutil.rmtree(cache_dir(storage, project, name, version), ignore_errors=True)
