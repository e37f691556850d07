"""Dataset workflows of the catalog: import an archive, open a version's view, delete with its caches.

The REST handlers, the CLI and (through the REST API) the magics all go through these,
so a deleted version never leaves its shared readers, thumbnails or stats behind.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import BadRequest
from .storage import Storage, check_name

if TYPE_CHECKING:
    from .datasets_view import DatasetView
    from .models import DatasetVersion
    from .service import Catalog

FORMATS = ("import", "imagefolder", "voc", "coco", "labelme")
IMPORT_SECONDS = 3600.0  # importing the largest upload (16 GiB) in a sandboxed worker
THUMBNAIL_SECONDS = 30.0  # a thumbnail of the largest image Pillow opens takes a few seconds
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
        if part is not None:
            raise BadRequest("split: give part or split, not both (split names the parts)", field="split")
        try:
            parse_split(split)
        except KPLDatasetError as error:
            raise BadRequest(f"split: {error}", field="split") from None
    if part is not None:  # `?part=` is no name
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
    """Import an archive with the hostile-safe importers, in the project's sandbox, and register it.

    Nothing is left on failure.
    """
    check_name(name)
    check_import(form, part, split)
    archive = Path(archive)
    sandbox = catalog.platform.sandbox
    with catalog.storage.staging(project) as tmp:
        staged = tmp / "archive" / archive.name
        catalog.stage(archive, staged)
        sandbox.give(project, tmp)
        try:
            sandbox.call(
                project,
                "kpl_lab.catalog.datasets:import_in_worker",
                str(staged),
                str(tmp / "dataset"),
                form,
                part,
                split,
                shown_as or archive.name,
                what=f"the import of {shown_as or archive.name}",
                timeout=IMPORT_SECONDS,
            )
        finally:
            sandbox.adopt(project, tmp)
        return catalog.add_dataset(project, name, tmp / "dataset", description)


def import_in_worker(
    archive: str, dest: str, form: str, part: str | None, split: str | None, shown_as: str
) -> None:
    """Import an archive into the dataset folder `dest` (in a sandboxed worker); refuse what is wrong in it."""
    from kpl_dataset import KPLDatasetError, importers

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
        raise BadRequest(str(error).replace(archive, shown_as), field="body") from None


def open_view(catalog: Catalog, project: str, name: str, version: str) -> tuple[DatasetVersion, DatasetView]:
    """Return a dataset version and the view that reads its pages, fields, thumbnails and stats."""
    from .datasets_view import DatasetView

    check_name(name)
    check_name(version, "version")
    row = catalog.get_dataset(project, f"{name}:{version}")

    def draw(data: bytes, size: int, shown_as: str) -> bytes:
        """Decode the image and draw its thumbnail in the project's sandbox."""
        return catalog.platform.sandbox.call(
            project,
            "kpl_lab.catalog.datasets_view:thumbnail_png",
            data,
            size,
            shown_as,
            what=f"a thumbnail of dataset {row.ref}",
            timeout=THUMBNAIL_SECONDS,
        )

    view = DatasetView(
        catalog.path(row), cache_dir(catalog.storage, project, name, row.version), row.ref, draw
    )
    return row, view


def forget(storage: Storage, project: str, refs: list[str]) -> None:
    """Drop the shared readers and the caches of deleted dataset versions."""
    from . import datasets_view

    for ref in refs:
        name, _, version = ref.partition(":")
        datasets_view.forget(storage.dataset_dir(project, name, version))
        shutil.rmtree(cache_dir(storage, project, name, version), ignore_errors=True)
