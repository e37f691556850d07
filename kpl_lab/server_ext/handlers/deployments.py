"""Deployments: create, list, show, delete, canary, promote, logs, and the predict gateway."""

from __future__ import annotations

import json

from tornado import web

from ...api.catalog import Deleted
from ...api.deployments import CanaryRequest, DeploymentList, DeploymentLogs, DeploymentRequest, ReplicaLog
from ...errors import BadRequest, ModelFailed
from ...serving.describe import deployment_model
from ...serving.gateway import VERSION_HEADER
from ..base import KPLHandler

LOG_LINES = 200


class DeploymentsHandler(KPLHandler):
    """GET: the project's deployments; POST: deploy a model version (replicas start at once)."""

    @web.authenticated
    async def get(self) -> None:
        """List deployments."""
        service = self.platform.deployments

        def describe_all():
            return [deployment_model(service, row, with_metrics=False) for row in service.list(self.project)]

        self.reply(DeploymentList(deployments=await self.blocking(describe_all)))

    @web.authenticated
    async def post(self) -> None:
        """Create a deployment."""
        request = self.body_as(DeploymentRequest)
        service = self.platform.deployments
        user = self.current_user.username if self.current_user is not None else ""

        def create():
            row = service.create(
                self.project, request.name, request.model, request.replicas, request.algorithm, user=user
            )
            return deployment_model(service, row, with_metrics=False)

        self.reply(await self.blocking(create), status=201)


class DeploymentHandler(KPLHandler):
    """GET: one deployment with replicas and request metrics per version; DELETE: stop it."""

    @web.authenticated
    async def get(self, name: str) -> None:
        """Show a deployment."""
        service = self.platform.deployments
        self.reply(await self.blocking(lambda: deployment_model(service, service.get(self.project, name))))

    @web.authenticated
    async def delete(self, name: str) -> None:
        """Delete a deployment."""
        self.reply(Deleted(deleted=await self.blocking(self.platform.deployments.delete, self.project, name)))


class DeploymentCanaryHandler(KPLHandler):
    """POST: serve a canary version to a percent of the requests."""

    @web.authenticated
    async def post(self, name: str) -> None:
        """Set the canary."""
        request = self.body_as(CanaryRequest)
        service = self.platform.deployments

        def canary():
            row = service.canary(
                self.project,
                name,
                request.model,
                request.weight,
                request.algorithm,
                request.sticky_header,
                request.replicas,
            )
            return deployment_model(service, row, with_metrics=False)

        self.reply(await self.blocking(canary))


class DeploymentPromoteHandler(KPLHandler):
    """POST: make the canary production once its replicas are ready."""

    @web.authenticated
    async def post(self, name: str) -> None:
        """Promote the canary."""
        service = self.platform.deployments

        def promote():
            return deployment_model(service, service.promote(self.project, name), with_metrics=False)

        self.reply(await self.blocking(promote))


class DeploymentLogsHandler(KPLHandler):
    """GET: the last lines of each replica's output."""

    @web.authenticated
    async def get(self, name: str) -> None:
        """Read a deployment's logs."""
        lines = self.query_int("lines", 100, 1, 10_000)
        found = await self.blocking(self.platform.deployments.logs, self.project, name, lines)
        self.reply(DeploymentLogs(logs=[ReplicaLog(**log) for log in found]))


class DeploymentPredictHandler(KPLHandler):
    """POST: one prediction, the body (or the multipart file) sent to a ready replica."""

    @web.authenticated
    async def post(self, name: str) -> None:
        """Predict."""
        body = self.request.body
        content_type = self.request.headers.get("Content-Type", "application/octet-stream")
        if content_type.startswith("multipart/form-data"):
            files = [f for found in self.request.files.values() for f in found]
            if not files:
                raise BadRequest("the multipart body holds no file", field="file")
            body, content_type = files[0].body, files[0].content_type or "application/octet-stream"
        prediction = await self.app.gateway.predict(
            self.project, name, body, content_type, self.request.headers.get
        )
        self.set_header(VERSION_HEADER, prediction.model_version)
        if prediction.status >= 400:  # the model's error, in the Error body every failure has
            error = (ModelFailed if prediction.status >= 500 else BadRequest)(_model_error(prediction.body))
            error.status = min(prediction.status, 502)
            raise error
        self.set_status(prediction.status)
        self.set_header("Content-Type", "application/json")
        self.finish(prediction.body)


def _model_error(body: bytes) -> str:
    try:
        return str(json.loads(body).get("error") or "the model failed")
    except (ValueError, AttributeError):
        return "the model failed"
