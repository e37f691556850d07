"""Dataset workflows of the catalog: import an archive, open a version's view, delete with its caches.

The REST handlers, the CLI and (through the REST API) the magics all go through these,
so a deleted version never leaves its shared readers, thumbnails or stats behind.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, urlencode

from ..errors import BadRequest
from .storage import CopyResult, Storage, check_name, link_files

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


def field_url(api_base: str, project: str, name: str, version: str) -> Callable[[str, int, str], str]:
    """Return (part, index, field path) -> the URL of that field of a dataset version under `api_base`."""
    base = "/".join(
        [api_base.rstrip("/"), "datasets", quote(name, safe=""), "versions", quote(version, safe="")]
    )

    def url(part: str, index: int, path: str) -> str:
        query = urlencode({"part": part, "project": project})
        return f"{base}/records/{index}/fields/{quote(path, safe='')}?{query}"

    return url


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


def link_written(src: Path, dest: Path) -> tuple[CopyResult, dict[str, int]]:
    """Link a kpl-dataset folder the platform wrote into `dest`; return its content version and records per part.

    The version hashes what the folder holds, not how or when it was written: each part's
    records and schema (`content_hash` of its manifest: no data is read), its properties
    (MetaDB), and the bytes of any other file (large File values, files beside the parts).
    Manifests' times and shard names do not count: the same content gives the same version.
    """
    from kpl_dataset import KPLDatasetError, MetaDB, list_parts
    from kpl_dataset.fs import resolve
    from kpl_dataset.manifest import content_hash, load_manifest
    from kpl_dataset.names import manifest_name, meta_name

    from .service import is_dataset_scratch

    try:
        manifests = {part: load_manifest(resolve(src), part) for part in list_parts(str(src))}
        properties = {part: _properties(MetaDB(resolve(src), part)) for part in manifests}
    except KPLDatasetError as error:
        raise BadRequest(f"{src}: {error}", field="path") from None
    if not manifests:
        raise BadRequest(f"{src}: not a kpl-dataset folder (no dataset part found)", field="path")
    shards = {s.path: s.bytes for m in manifests.values() for s in m.shards}
    described = {manifest_name(p) for p in manifests} | {meta_name(p) for p in manifests}
    files, size = {}, 0
    linked = link_files(src, dest, skip=is_dataset_scratch)
    for rel, path in linked:
        found = path.stat().st_size
        size += found
        if rel in shards:
            if found != shards.pop(rel):
                raise BadRequest(f"{src}: {rel} is {found} bytes, not what its manifest says", field="path")
        elif rel not in described:
            with open(path, "rb") as f:
                files[rel] = hashlib.file_digest(f, "sha256").hexdigest()
    if shards:
        raise BadRequest(f"{src}: {', '.join(sorted(shards))} named by a manifest is missing", field="path")
    doc = {
        "parts": {p: {"records": content_hash(m), "properties": properties[p]} for p, m in manifests.items()},
        "files": files,
    }
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
    counts = {part: manifests[part].num_rows for part in part_order(list(manifests))}
    return CopyResult(digest, size, [rel for rel, _ in linked]), counts


def _properties(meta) -> dict:
    """Return a part's MetaDB as a dict."""
    keys = meta.keys()
    return {key: meta.get(key) for key in keys}


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
