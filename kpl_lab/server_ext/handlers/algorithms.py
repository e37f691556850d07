"""Algorithms: list, upload, show (functions, resources, ports, parameter schema), delete."""

from __future__ import annotations

from tornado import web

from ...api.algorithms import AlgorithmList, AlgorithmVersionDetail
from ...api.catalog import Deleted
from ...catalog.serialize import algorithm_detail_model, matches, named_model, version_model
from ...catalog.storage import check_name
from ...errors import BadRequest
from ..base import KPLHandler
from ..upload import UploadHandler


@web.stream_request_body
class AlgorithmsHandler(UploadHandler):
    """GET: the project's algorithms; POST: upload an algorithm archive as a new version."""

    @web.authenticated
    async def get(self) -> None:
        """List algorithms."""
        query = self.get_query_argument("q", None)
        rows = await self.blocking(self.platform.catalog.list_algorithms, self.project)
        self.reply(AlgorithmList(algorithms=[named_model("algorithm", a) for a in rows if matches(a, query)]))

    def check_upload_query(self) -> None:
        """Check the name before the body is stored."""
        name = self.get_query_argument("name", None)
        if name is not None:  # `?name=` is no name
            check_name(name)
        self.project  # noqa: B018 - refuse a forbidden project before the body arrives

    @web.authenticated
    async def post(self) -> None:
        """Install the uploaded archive and answer the new version."""
        name = self.get_query_argument("name", None)
        archive = self.finish_upload(name or "algorithm")
        if archive.name == "upload":
            raise BadRequest("the upload is not a zip or tar archive", field="body")

        def work():
            try:
                return self.platform.catalog.add_algorithm(
                    self.project, archive, name=name, description=self.get_query_argument("description", "")
                )
            except BadRequest as error:
                raise BadRequest(error.message.replace(str(archive.parent), "upload"), field="body") from None

        row = await self.blocking(work)
        self.reply(version_model("algorithm", row), status=201)


class AlgorithmHandler(KPLHandler):
    """GET: an algorithm and its versions; DELETE: every version."""

    @web.authenticated
    async def get(self, name: str) -> None:
        """Show an algorithm."""
        version = await self.blocking(self.platform.catalog.get_algorithm, self.project, name)
        self.reply(named_model("algorithm", version.algorithm))

    @web.authenticated
    async def delete(self, name: str) -> None:
        """Delete an algorithm."""
        self.reply(
            Deleted(deleted=await self.blocking(self.platform.catalog.delete_algorithm, self.project, name))
        )


def algorithm_detail(platform, project: str, ref: str) -> AlgorithmVersionDetail:
    """Return a version with its functions, resources, inputs, outputs and parameter schema."""
    row = platform.catalog.get_algorithm(project, ref)
    return algorithm_detail_model(
        row, platform.catalog.read_algorithm(row), image_used=platform.jobs.executor.uses_images
    )


class AlgorithmVersionHandler(KPLHandler):
    """GET: one version in full; DELETE: that version."""

    @web.authenticated
    async def get(self, name: str, version: str) -> None:
        """Show an algorithm version."""
        check_name(version, "version")
        self.reply(await self.blocking(algorithm_detail, self.platform, self.project, f"{name}:{version}"))

    @web.authenticated
    async def delete(self, name: str, version: str) -> None:
        """Delete an algorithm version."""
        check_name(version, "version")
        deleted = await self.blocking(
            self.platform.catalog.delete_algorithm, self.project, f"{name}:{version}"
        )
        self.reply(Deleted(deleted=deleted))
