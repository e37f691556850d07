"""Predictions: the body (or a multipart file) goes to a ready replica, for a user or a deployment's API key."""

from __future__ import annotations

from jupyter_server.auth.decorator import allow_unauthenticated
from tornado import web

from ...errors import Forbidden
from ...operations.uploads import Upload
from ...serving.forms import first_file
from ...serving.keys import key_of
from ..base import OperationHandler


class DeploymentPredictHandler(OperationHandler):
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
            self.caller = self.caller_in(self._project_of_key(name))
        elif self.current_user is None:
            raise web.HTTPError(403)
        body = self.request.body
        content_type = self.request.headers.get("Content-Type", "application/octet-stream")
        if content_type.startswith("multipart/form-data"):  # tornado read it (a broken one: 400 before this)
            body, content_type = first_file(self.request.files)
        self.caller.gateway = self.app.gateway
        upload = Upload(data=body, content_type=content_type, header=self.request.headers.get)
        await self.answer(await self.perform({**self.arguments((name,)), "upload": upload}))
