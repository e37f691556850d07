"""Models: list, upload, show (files, lineage, structure), aliases, download, delete."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from ..api.catalog import Deleted
from ..api.models import AliasRequest, Model, ModelList, ModelStructure, ModelVersion
from ..catalog.serialize import matches, named_model, version_model
from ..catalog.service import MODEL_ARCHIVE_SUFFIXES
from ..catalog.storage import check_name
from ..errors import BadRequest
from .caller import Caller
from .spec import Raw
from .uploads import Upload


def list_models(caller: Caller, q: str | None) -> ModelList:
    """List the project's models (`q` searches names and descriptions)."""
    rows = caller.platform.catalog.list_models(caller.project)
    return ModelList(models=[named_model("model", m) for m in rows if matches(m, q)])


def check_upload(caller: Caller, name: str | None, description: str | None, filename: str | None) -> None:
    """Refuse the names before the body is stored."""
    check_name(name or "", "name")
    if filename is not None:  # `?filename=` is no name
        check_name(filename, "filename")


def add_model(
    caller: Caller, upload: Upload, name: str, description: str | None, filename: str | None
) -> ModelVersion:
    """Store an uploaded model file, or unpack an archive of its folder, as a new version."""
    # a file named as no archive is one model file, whatever its bytes (TorchScript files are zips)
    one_file = bool(filename) and not filename.lower().endswith(MODEL_ARCHIVE_SUFFIXES)
    path = upload.archive(name, archive=not one_file)
    if path.name == "upload":  # one model file: keep the name the caller gave it
        path = upload.path = path.rename(path.with_name(filename or "model.bin"))
    try:
        row = caller.platform.catalog.add_model(caller.project, name, path, description=description or "")
    except BadRequest as error:
        raise BadRequest(error.message.replace(str(path.parent), "upload"), field="body") from None
    return version_model("model", row)


def show_model(caller: Caller, name: str) -> Model:
    """Show a model and its versions."""
    return named_model("model", caller.platform.catalog.get_model(caller.project, name).model)


def delete_model(caller: Caller, name: str) -> Deleted:
    """Delete every version of a model."""
    return Deleted(deleted=caller.platform.catalog.delete_model(caller.project, name))


def show_version(caller: Caller, name: str, version: str) -> ModelVersion:
    """Show a model version with its files and lineage."""
    check_name(version, "version")
    return version_model("model", caller.platform.catalog.get_model(caller.project, f"{name}:{version}"))


def delete_version(caller: Caller, name: str, version: str) -> Deleted:
    """Delete one model version."""
    check_name(version, "version")
    return Deleted(deleted=caller.platform.catalog.delete_model(caller.project, f"{name}:{version}"))


def structure(caller: Caller, name: str, version: str) -> ModelStructure:
    """Describe a model version's files: layers or ops, parameter counts, shapes (read in the project's sandbox)."""
    check_name(version, "version")
    found = caller.platform.catalog.model_structure(caller.project, f"{name}:{version}")
    return ModelStructure.model_validate(found)


def download(caller: Caller, name: str, version: str) -> Raw:
    """Answer a model version's files as one zip archive."""
    check_name(version, "version")
    platform = caller.platform
    row = platform.catalog.get_model(caller.project, f"{name}:{version}")
    folder = Path(tempfile.mkdtemp(dir=platform.home))
    try:
        archive = shutil.make_archive(str(folder / row.version), "zip", root_dir=platform.catalog.path(row))
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return Raw(
        Path(archive),
        "application/zip",
        {"Content-Disposition": f'attachment; filename="{name}-{row.version}.zip"'},
        cleanup=lambda: shutil.rmtree(folder, ignore_errors=True),
    )


def show_alias(caller: Caller, name: str, alias: str) -> ModelVersion:
    """Resolve `NAME@ALIAS` to the version it points at."""
    return version_model("model", caller.platform.catalog.get_model(caller.project, f"{name}@{alias}"))


def set_alias(caller: Caller, name: str, alias: str, body: AliasRequest) -> Model:
    """Point an alias at a version (the latest when none is named); answer the model with its aliases."""
    check_name(name, "name")
    catalog = caller.platform.catalog
    catalog.set_model_alias(caller.project, f"{name}:{body.version}" if body.version else name, alias)
    return named_model("model", catalog.get_model(caller.project, name).model)


def remove_alias(caller: Caller, name: str, alias: str) -> Model:
    """Remove an alias; answer the model with the aliases left."""
    catalog = caller.platform.catalog
    catalog.remove_model_alias(caller.project, name, alias)
    return named_model("model", catalog.get_model(caller.project, name).model)
