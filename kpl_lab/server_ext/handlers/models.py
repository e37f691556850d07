"""Models: list, upload, show (files, lineage, structure), aliases, download, delete."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from tornado import web

from ...api.catalog import Deleted
from ...api.models import AliasRequest, ModelList, ModelStructure
from ...catalog.serialize import matches, named_model, version_model
from ...catalog.service import MODEL_ARCHIVE_SUFFIXES
from ...catalog.storage import check_name
from ...errors import BadRequest
from ..base import KPLHandler
from ..upload import UploadHandler


@web.stream_request_body
class ModelsHandler(UploadHandler):
    """GET: the project's models (`?q=` searches); POST: upload a model file or archive as a new version."""

    @web.authenticated
    async def get(self) -> None:
        """List models."""
        query = self.get_query_argument("q", None)
        rows = await self.blocking(self.platform.catalog.list_models, self.project)
        self.reply(ModelList(models=[named_model("model", m) for m in rows if matches(m, query)]))

    def check_upload_query(self) -> None:
        """Check the names before the body is stored."""
        check_name(self.get_query_argument("name", ""), "name")
        filename = self.get_query_argument("filename", None)
        if filename is not None:  # `?filename=` is no name
            check_name(filename, "filename")
        self.project  # noqa: B018 - refuse a forbidden project before the body arrives

    @web.authenticated
    async def post(self) -> None:
        """Store the uploaded file (or unpack the archive) and answer the new version."""
        name = self.get_query_argument("name")
        filename = self.get_query_argument("filename", None)
        # a file named as no archive is one model file, whatever its bytes (TorchScript files are zips)
        one_file = bool(filename) and not filename.lower().endswith(MODEL_ARCHIVE_SUFFIXES)
        upload = self.finish_upload(name, archive=not one_file)
        if upload.name == "upload":  # one model file: keep the name the caller gave it
            upload = upload.rename(upload.with_name(filename or "model.bin"))
        self.upload = upload

        def work():
            try:
                return self.platform.catalog.add_model(
                    self.project, name, upload, description=self.get_query_argument("description", "")
                )
            except BadRequest as error:
                raise BadRequest(error.message.replace(str(upload.parent), "upload"), field="body") from None

        self.upload_in_use = True
        try:
            row = await self.blocking(work)
        finally:
            self.upload_in_use = False
        self.reply(version_model("model", row), status=201)


class ModelHandler(KPLHandler):
    """GET: a model and its versions; DELETE: every version."""

    @web.authenticated
    async def get(self, name: str) -> None:
        """Show a model."""
        version = await self.blocking(self.platform.catalog.get_model, self.project, name)
        self.reply(named_model("model", version.model))

    @web.authenticated
    async def delete(self, name: str) -> None:
        """Delete a model."""
        self.reply(
            Deleted(deleted=await self.blocking(self.platform.catalog.delete_model, self.project, name))
        )


class ModelVersionHandler(KPLHandler):
    """GET: one model version with files and lineage; DELETE: that version."""

    @web.authenticated
    async def get(self, name: str, version: str) -> None:
        """Show a model version."""
        check_name(version, "version")
        row = await self.blocking(self.platform.catalog.get_model, self.project, f"{name}:{version}")
        self.reply(version_model("model", row))

    @web.authenticated
    async def delete(self, name: str, version: str) -> None:
        """Delete a model version."""
        check_name(version, "version")
        deleted = await self.blocking(self.platform.catalog.delete_model, self.project, f"{name}:{version}")
        self.reply(Deleted(deleted=deleted))


class ModelStructureHandler(KPLHandler):
    """GET: layers/ops, parameter counts and shapes of a model version's files."""

    @web.authenticated
    async def get(self, name: str, version: str) -> None:
        """Describe a model version's files."""
        check_name(version, "version")

        structure = await self.sandboxed(
            self.platform.catalog.model_structure, self.project, f"{name}:{version}"
        )
        self.reply(ModelStructure.model_validate(structure))


class ModelDownloadHandler(KPLHandler):
    """GET: a model version's files as one zip archive."""

    @web.authenticated
    async def get(self, name: str, version: str) -> None:
        """Answer the zip of a model version."""
        check_name(version, "version")
        row = await self.blocking(self.platform.catalog.get_model, self.project, f"{name}:{version}")
        folder = self.platform.catalog.path(row)
        with tempfile.TemporaryDirectory(dir=self.platform.home) as tmp:
            archive = await self.blocking(
                shutil.make_archive, str(Path(tmp) / row.version), "zip", root_dir=folder
            )
            self.set_header("Content-Type", "application/zip")
            self.set_header("Content-Disposition", f'attachment; filename="{name}-{row.version}.zip"')
            with open(archive, "rb") as file:
                while chunk := file.read(1 << 20):
                    self.write(chunk)
                    await self.flush()
        self.finish()


class ModelAliasHandler(KPLHandler):
    """GET: the version an alias points at; PUT: point it at a version; DELETE: remove it."""

    @web.authenticated
    async def get(self, name: str, alias: str) -> None:
        """Resolve `NAME@ALIAS`."""
        row = await self.blocking(self.platform.catalog.get_model, self.project, f"{name}@{alias}")
        self.reply(version_model("model", row))

    @web.authenticated
    async def put(self, name: str, alias: str) -> None:
        """Point the alias at a version and answer the model with its aliases."""
        body = self.body_as(AliasRequest)
        check_name(name, "name")
        ref = f"{name}:{body.version}" if body.version else name
        catalog = self.platform.catalog
        await self.blocking(catalog.set_model_alias, self.project, ref, alias)
        row = await self.blocking(catalog.get_model, self.project, name)
        self.reply(named_model("model", row.model))

    @web.authenticated
    async def delete(self, name: str, alias: str) -> None:
        """Remove the alias and answer the model with the aliases left."""
        catalog = self.platform.catalog
        await self.blocking(catalog.remove_model_alias, self.project, name, alias)
        row = await self.blocking(catalog.get_model, self.project, name)
        self.reply(named_model("model", row.model))
