"""The hub's users and groups, read and written through the JupyterHub REST API with the service's token."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace
from typing import Any

from tornado.httpclient import AsyncHTTPClient, HTTPClientError
from tornado.httputil import url_concat

from ..catalog.rules import Rules, check_quota
from ..catalog.storage import check_name
from ..errors import Conflict, KPLError, NotFound
from ..spawner.quota import QUOTA_PROPERTY, load_hub_quotas


class HubError(KPLError):
    """The hub refused or failed a request of the service."""

    status = 502


class HubDirectory:
    """Users (admin flag, groups), groups (quota properties) and servers, as the hub knows them."""

    def __init__(self, api_url: str, token: str, cache_seconds: float = 5.0) -> None:
        self.api_url = api_url.rstrip("/")
        self.token = token
        self.cache_seconds = cache_seconds
        self._users: dict[str, tuple[float, dict | None]] = {}

    async def request(self, path: str, method: str = "GET", body: Any = None, **query: Any) -> Any:
        """Call the hub API and return the parsed answer (None for 404)."""
        url = url_concat(
            f"{self.api_url}/{path.lstrip('/')}", {k: v for k, v in query.items() if v is not None}
        )
        payload = None if body is None else json.dumps(body)
        try:
            response = await AsyncHTTPClient().fetch(
                url,
                method=method,
                body=payload,
                headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
                allow_nonstandard_methods=True,
            )
        except HTTPClientError as error:
            if error.code == 404:
                return None
            detail = error.response.body.decode(errors="replace")[:300] if error.response else str(error)
            raise HubError(f"hub API {method} /{path.lstrip('/')}: {error.code} {detail}") from None
        return json.loads(response.body) if response.body else None

    async def user(self, name: str) -> dict | None:
        """Return the hub's model of a user (admin, groups, servers), cached a few seconds."""
        now = time.monotonic()
        cached = self._users.get(name)
        if cached and now - cached[0] < self.cache_seconds:
            return cached[1]
        model = await self.request(f"users/{name}")
        self._users[name] = (now, model)
        return model

    async def users(self) -> list[dict]:
        """Return every user with their servers."""
        return await self.request("users", state="") or []

    async def groups(self) -> list[dict]:
        """Return every group with its properties."""
        return await self.request("groups") or []

    async def set_quota(self, project: str, quota: dict) -> dict:
        """Write a project's quota into its group properties (checked first) and return it."""
        checked = check_quota(quota if isinstance(quota, dict) else None, "quota")
        group = await self.request(f"groups/{project}")
        if group is None:
            raise NotFound(f"project {project!r}: no such group in the hub", field="project")
        properties = dict(group.get("properties") or {})
        properties[QUOTA_PROPERTY] = checked
        await self.request(f"groups/{project}/properties", method="PUT", body=properties)
        self._users.clear()
        return checked

    async def create_user(self, name: str) -> dict:
        """Create a hub user; refuse one that exists."""
        check_name(name, "name")
        if await self.request(f"users/{name}") is not None:
            raise Conflict(f"user {name!r} exists already", field="name")
        return await self.request(f"users/{name}", method="POST", body={})

    async def create_project(self, name: str, quota: dict) -> dict:
        """Create a project (a hub group) with its quota; refuse one that exists."""
        check_name(name, "name")
        checked = check_quota(quota, "quota")
        if await self.request(f"groups/{name}") is not None:
            raise Conflict(f"project {name!r} exists already", field="name")
        await self.request(f"groups/{name}", method="POST", body={})
        await self.request(f"groups/{name}/properties", method="PUT", body={QUOTA_PROPERTY: checked})
        return {"name": name, "quota": checked}

    async def add_member(self, project: str, user: str) -> None:
        """Add an existing user to an existing project; name whichever is missing."""
        if await self.request(f"groups/{project}") is None:
            raise NotFound(f"project {project!r}: no such group in the hub", field="project")
        if await self.request(f"users/{user}") is None:
            raise NotFound(f"user {user!r}: no such user in the hub; create the user first", field="user")
        await self.request(f"groups/{project}/users", method="POST", body={"users": [user]})
        self._users.pop(user, None)

    async def load_quotas(self, rules: Rules) -> list[str]:
        """Load the groups' quota properties that changed into the platform's rules; return refusals."""
        groups = [as_group(model) for model in await self.groups()]
        return load_hub_quotas(rules, groups)


def as_group(model: dict) -> SimpleNamespace:
    """Return a hub group model as the object `hub_quota` reads."""
    return SimpleNamespace(name=model["name"], properties=model.get("properties") or {})
