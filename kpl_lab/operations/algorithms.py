"""Algorithms: list, upload, show (functions, resources, ports, parameter schema), delete."""

from __future__ import annotations

from ..api.algorithms import Algorithm, AlgorithmList, AlgorithmVersion, AlgorithmVersionDetail
from ..api.catalog import Deleted
from ..catalog.serialize import algorithm_detail_model, matches, named_model, version_model
from ..catalog.storage import check_name
from ..errors import BadRequest
from .caller import Caller
from .uploads import Upload


def list_algorithms(caller: Caller, q: str | None) -> AlgorithmList:
    """List the project's algorithms (`q` searches names and descriptions)."""
    rows = caller.platform.catalog.list_algorithms(caller.project)
    return AlgorithmList(algorithms=[named_model("algorithm", a) for a in rows if matches(a, q)])


def check_upload(caller: Caller, name: str | None, description: str | None) -> None:
    """Refuse the name before the body is stored."""
    if name is not None:  # `?name=` is no name
        check_name(name)


def add_algorithm(
    caller: Caller, upload: Upload, name: str | None, description: str | None
) -> AlgorithmVersion:
    """Install an uploaded algorithm archive as a new version (the same content again: the same version)."""
    archive = upload.archive(name or "algorithm")
    if archive.name == "upload":
        raise BadRequest("the upload is not a zip or tar archive", field="body")
    try:
        row = caller.platform.catalog.add_algorithm(
            caller.project, archive, name=name or None, description=description or ""
        )
    except BadRequest as error:
        raise BadRequest(error.message.replace(str(archive.parent), "upload"), field="body") from None
    return version_model("algorithm", row)


def show_algorithm(caller: Caller, name: str) -> Algorithm:
    """Show an algorithm and its versions."""
    return named_model("algorithm", caller.platform.catalog.get_algorithm(caller.project, name).algorithm)


def delete_algorithm(caller: Caller, name: str) -> Deleted:
    """Delete every version of an algorithm."""
    return Deleted(deleted=caller.platform.catalog.delete_algorithm(caller.project, name))


def show_version(caller: Caller, name: str, version: str) -> AlgorithmVersionDetail:
    """Show a version with its functions, resources, inputs, outputs and parameter schema."""
    check_name(version, "version")
    catalog = caller.platform.catalog
    row = catalog.get_algorithm(caller.project, f"{name}:{version}")
    return algorithm_detail_model(
        row, catalog.read_algorithm(row), image_used=caller.platform.jobs.executor.uses_images
    )


def delete_version(caller: Caller, name: str, version: str) -> Deleted:
    """Delete one algorithm version."""
    check_name(version, "version")
    return Deleted(deleted=caller.platform.catalog.delete_algorithm(caller.project, f"{name}:{version}"))
