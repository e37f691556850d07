"""Models: list, show (files and lineage), delete."""

from __future__ import annotations

from tornado import web

from ...api.catalog import Deleted
from ...api.models import ModelList
from ...catalog.serialize import matches, named_model, version_model
from ...catalog.storage import check_name
from ..base import KPLHandler


class ModelsHandler(KPLHandler):
    """GET: the project's models (`?q=` searches)."""

    @web.authenticated
    async def get(self) -> None:
        """List models."""
        query = self.get_query_argument("q", None)
        rows = await self.blocking(self.platform.catalog.list_models, self.project)
        self.reply(ModelList(models=[named_model("model", m) for m in rows if matches(m, query)]))


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
