"""Hub users' own API tokens at the gateway process: the hub says whose they are, the hub's groups give the projects.

Under JupyterHub (`kpl-lab up`) the gateway process is the hub service `kpl-gateway`, started
by the platform service with the `kpl-gateway` service's API token in `KPL_GATEWAY_API_TOKEN`
(and the hub's `JUPYTERHUB_API_URL`). Besides deployment keys it takes a hub user's API token
(a notebook's `JUPYTERHUB_API_TOKEN`, or one made on the hub's token page) in
`Authorization: token …` or `Bearer …`: JupyterHub's `HubAuth` asks the hub whose it is and
with which scopes (an answer is kept `CACHE_SECONDS`, so most requests do not ask the hub);
the token must be a user's and carry `access:services!service=kpl-gateway`, and the project
the request names (`?project=`, else the default one) is checked with the platform service's
own rule (`kpl_lab.hub.access`): another user's project is not found.
"""

from __future__ import annotations

import os

from tornado import web

from ..catalog.storage import check_name
from ..errors import Forbidden, Unauthorized
from ..hub import access
from ..hub.directory import HubDirectory, HubError

SERVICE_NAME = "kpl-gateway"
ACCESS_SCOPE = f"access:services!service={SERVICE_NAME}"
TOKEN_ENV = "KPL_GATEWAY_API_TOKEN"
CACHE_SECONDS = 30  # a revoked token or a token whose scopes changed is seen within this
MISSING = (
    "send your JupyterHub API token (Authorization: token …; a notebook's $JUPYTERHUB_API_TOKEN "
    "or one made on the hub's token page) or a deployment key (Authorization: Bearer kpldk_… or "
    "X-KPL-API-Key; `kpl-lab deployment key create NAME`)"
)


class HubTokens:
    """Find the project a hub user's API token opens for one request."""

    def __init__(
        self, api_url: str, api_token: str, default_project: str, cache_seconds: int = CACHE_SECONDS
    ) -> None:
        from jupyterhub.services.auth import HubAuth  # 0.4 s of imports: only under the hub

        self.auth = HubAuth(
            api_url=api_url, api_token=api_token, access_scopes={ACCESS_SCOPE}, cache_max_age=cache_seconds
        )
        self.directory = HubDirectory(api_url, api_token)
        self.default_project = default_project

    async def project(self, authorization: str | None, asked: str | None) -> str:
        """Return the project this request may predict in: 401 without a token, 403 for one the hub refuses."""
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() not in ("token", "bearer") or not token:
            raise Unauthorized(MISSING)
        try:
            model = await self.auth.user_for_token(token, sync=False)
        except web.HTTPError as error:  # the hub is unreachable or failed
            raise HubError(f"the hub could not check the token: {error.log_message}") from None
        if model is None:
            raise Forbidden("the hub does not know this token (unknown, expired or revoked)")
        if model.get("kind", "user") != "user":
            raise Forbidden(
                f"this token is the {model.get('kind')} {model['name']!r}'s: send a user's API token"
            )
        if not self.auth.check_scopes(self.auth.access_scopes, model):
            raise Forbidden(f"this token of {model['name']!r} lacks the scope {ACCESS_SCOPE}")
        user = await access.member(self.directory, model["name"])
        if user is None:
            raise Forbidden(f"the hub has no user {model['name']!r}")
        project = asked or self.default_project
        check_name(project, "project")
        access.may_use_project(user, project, self.default_project)
        return project


def from_environment(default_project: str) -> HubTokens | None:
    """Return the hub's token check when this gateway process runs under JupyterHub, else None."""
    token, api_url = os.environ.get(TOKEN_ENV), os.environ.get("JUPYTERHUB_API_URL")
    if not token or not api_url:
        return None
    return HubTokens(api_url, token, default_project)
