"""Deployments: create, list, show, delete, canary, promote, logs, API keys, and the predict gateway."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from jupyter_server.auth.decorator import allow_unauthenticated
from tornado import web

from ...api.catalog import Deleted
from ...api.deployments import (
    CanaryRequest,
    DeploymentKey,
    DeploymentKeyCreated,
    DeploymentKeyList,
    DeploymentList,
    DeploymentLogs,
    DeploymentMetricsHistory,
    DeploymentRequest,
    MetricsPoint,
    ReplicaLog,
    VersionMetrics,
)
from ...catalog.serialize import utc
from ...errors import BadRequest, Forbidden, ModelFailed
from ...serving import history
from ...serving.describe import deployment_model
from ...serving.forms import first_file
from ...serving.gateway import VERSION_HEADER
from ...serving.keys import key_of
from ..base import KPLHandler

LOG_LINES = 200
DEFAULT_SPAN = timedelta(hours=1)  # of the metrics history without ?since=


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

        self.audit_target = request.name
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


class DeploymentMetricsHandler(KPLHandler):
    """GET: request metrics per model version over time (10 s intervals) since a time."""

    @web.authenticated
    async def get(self, name: str) -> None:
        """Read the metrics history."""
        since = _since(self.get_query_argument("since", None))
        service = self.platform.deployments

        def read():
            row = service.get(self.project, name)
            return history.series(self.platform, row.id, since)

        series, totals = await self.blocking(read)
        self.reply(
            DeploymentMetricsHistory(
                interval_seconds=history.BUCKET_SECONDS,
                since=since,
                series={v: [MetricsPoint(**p) for p in points] for v, points in series.items()},
                totals={v: VersionMetrics(**t) for v, t in totals.items()},
            )
        )


class DeploymentKeysHandler(KPLHandler):
    """GET: a deployment's API keys; POST: make one (the answer shows the key this once)."""

    @web.authenticated
    async def get(self, name: str) -> None:
        """List keys."""
        rows = await self.blocking(self.platform.deployments.keys.list, self.project, name)
        self.reply(DeploymentKeyList(keys=[_key(row) for row in rows]))

    @web.authenticated
    async def post(self, name: str) -> None:
        """Create a key."""
        user = self.current_user.username if self.current_user is not None else ""
        row, key = await self.blocking(self.platform.deployments.keys.create, self.project, name, user)
        self.audit_target = f"{name}/{row.id}"  # the key's id, never the key
        self.reply(DeploymentKeyCreated(**_key(row).model_dump(), key=key), status=201)


class DeploymentKeyHandler(KPLHandler):
    """DELETE: revoke one API key of a deployment."""

    @web.authenticated
    async def delete(self, name: str, key_id: str) -> None:
        """Revoke a key."""
        keys = self.platform.deployments.keys
        self.reply(Deleted(deleted=await self.blocking(keys.revoke, self.project, name, key_id)))


class DeploymentPredictHandler(KPLHandler):
    """POST: one prediction, the body (or the multipart file) sent to a ready replica.

    The caller is a logged-in user, or one with an API key of this very deployment (which
    opens nothing else: no other deployment, no other route).
    """

    _key_owner: tuple[str, str] | None = None  # (project, deployment) of the caller's key

    async def prepare(self) -> None:
        """Authenticate a deployment key, or the caller as every other route does."""
        key = key_of(self.request.headers.get)
        if key is None:
            await super().prepare()
            return
        self.current_user = self._jupyter_current_user = None
        if not self.check_host():
            raise web.HTTPError(403)
        keys = self.platform.deployments.keys
        self._key_owner = keys.cached(key) or await self.blocking(keys.find, key)
        if self._key_owner is None:
            raise Forbidden("this deployment key is unknown or revoked")

    def _project_of_key(self, name: str) -> str:
        """Return the project of the key's deployment; refuse another deployment or project."""
        project, deployment = self._key_owner
        asked = self.get_query_argument("project", None)
        if deployment != name or (asked is not None and asked != project):
            raise Forbidden(f"this key is for deployment {deployment!r} only")
        return project

    @allow_unauthenticated  # authenticated here: a deployment key, else the user as everywhere
    async def post(self, name: str) -> None:
        """Predict."""
        if self._key_owner is not None:
            project = self._project_of_key(name)
        elif self.current_user is None:
            raise web.HTTPError(403)
        else:
            project = self.project
        body = self.request.body
        content_type = self.request.headers.get("Content-Type", "application/octet-stream")
        if content_type.startswith("multipart/form-data"):  # tornado read it (a broken one: 400 before this)
            body, content_type = first_file(self.request.files)
        prediction = await self.app.gateway.predict(
            project, name, body, content_type, self.request.headers.get
        )
        self.set_header(VERSION_HEADER, prediction.model_version)
        if prediction.status >= 400:  # the model's error, in the Error body every failure has
            error = (ModelFailed if prediction.status >= 500 else BadRequest)(_model_error(prediction.body))
            error.status = min(prediction.status, 502)
            raise error
        self.set_status(prediction.status)
        self.set_header("Content-Type", "application/json")
        self.finish(prediction.body)


def _since(text: str | None) -> datetime:
    """Return the `since` query argument as a UTC time (default: an hour ago; a bucket's start is kept)."""
    if not text:
        return datetime.now(UTC) - DEFAULT_SPAN
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise BadRequest(
            f"since: expected an ISO 8601 time such as 2026-11-26T12:00:00Z, got {text!r}", field="since"
        ) from None
    moment = utc(moment)
    return moment.replace(second=moment.second - moment.second % history.BUCKET_SECONDS, microsecond=0)


def _key(row) -> DeploymentKey:
    return DeploymentKey(id=row.id, prefix=row.prefix, user=row.user, created=utc(row.created))


def _model_error(body: bytes) -> str:
    try:
        return str(json.loads(body).get("error") or "the model failed")
    except (ValueError, AttributeError):
        return "the model failed"
