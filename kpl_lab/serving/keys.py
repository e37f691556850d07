"""API keys of deployments: a caller outside JupyterLab predicts with one deployment, and nothing else.

A key is `kpldk_` and 43 random URL-safe characters, printed once when made; the catalog keeps
only its SHA-256 digest (and its first characters, to tell keys apart in a list). A caller sends
it as `Authorization: Bearer <key>` or `X-KPL-API-Key: <key>`. Found keys are remembered for
`CACHE_SECONDS`, so the predict path reads no database; a key revoked through this process is
forgotten at once, one revoked by another process (the CLI) within `CACHE_SECONDS`.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable, Mapping

from sqlalchemy import select

from ..catalog.deployments import Deployment, DeploymentKey
from ..catalog.models import Project
from ..errors import NotFound

KEY_PREFIX = "kpldk_"
HEADER = "X-KPL-API-Key"
SHOWN_CHARACTERS = 6  # random characters of a key shown in `key list`
CACHE_SECONDS = 2.0


def digest(key: str) -> str:
    """Return the SHA-256 hex digest the catalog keeps of a key."""
    return hashlib.sha256(key.encode()).hexdigest()


def key_of(headers: Mapping[str, str] | Callable[[str], str | None]) -> str | None:
    """Return the deployment key a request carries (Bearer or X-KPL-API-Key), or None."""
    get = headers if callable(headers) else headers.get
    found = get(HEADER)
    if found:
        return found.strip()
    scheme, _, value = (get("Authorization") or "").partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer" and value.startswith(KEY_PREFIX):  # other bearer tokens are Jupyter's
        return value
    return None


class DeploymentKeys:
    """Make, list, revoke and look up the API keys of deployments."""

    def __init__(self, service) -> None:
        self.service = service
        self._found: dict[str, tuple[float, tuple[str, str]]] = {}  # digest -> (until, (project, name))

    def create(self, project: str, name: str, user: str = "") -> tuple[DeploymentKey, str]:
        """Make a key for a deployment; return its row and the key itself (shown this once)."""
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        with self.service.platform.session(immediate=True) as session:
            deployment = self.service._get(session, project, name)
            row = DeploymentKey(
                id="k" + secrets.token_hex(4),
                deployment_id=deployment.id,
                digest=digest(key),
                prefix=key[: len(KEY_PREFIX) + SHOWN_CHARACTERS],
                user=user,
            )
            session.add(row)
        return row, key

    def list(self, project: str, name: str) -> list[DeploymentKey]:
        """Return a deployment's keys, oldest first (never the keys themselves)."""
        with self.service.platform.session() as session:
            deployment = self.service._get(session, project, name)
            rows = list(
                session.scalars(
                    select(DeploymentKey)
                    .where(DeploymentKey.deployment_id == deployment.id)
                    .order_by(DeploymentKey.created, DeploymentKey.id)
                )
            )
            return rows

    def revoke(self, project: str, name: str, key_id: str) -> list[str]:
        """Delete one key of a deployment; callers using it get 403 from now on."""
        with self.service.platform.session(immediate=True) as session:
            deployment = self.service._get(session, project, name)
            row = session.scalar(
                select(DeploymentKey).where(
                    DeploymentKey.deployment_id == deployment.id, DeploymentKey.id == key_id
                )
            )
            if row is None:
                raise NotFound(f"deployment {name!r} has no key {key_id!r}", field="key_id")
            self._found.pop(row.digest, None)
            session.delete(row)
        return [key_id]

    def cached(self, key: str) -> tuple[str, str] | None:
        """Return the (project, deployment) of a key looked up lately, without the database."""
        found = self.remembered(key)
        return None if found is None else found[1]

    def remembered(self, key: str) -> tuple[float, tuple[str, str]] | None:
        """Return (until: monotonic time, (project, deployment)) of a key looked up lately, without the database."""
        found = self._found.get(digest(key))
        if found is None or found[0] < time.monotonic():
            return None
        return found

    def find(self, key: str) -> tuple[str, str] | None:
        """Return the (project, deployment) a key belongs to, or None for an unknown key."""
        hashed = digest(key)
        with self.service.platform.session() as session:
            found = session.execute(
                select(Project.name, Deployment.name)
                .select_from(DeploymentKey)
                .join(Deployment, DeploymentKey.deployment_id == Deployment.id)
                .join(Project, Deployment.project_id == Project.id)
                .where(DeploymentKey.digest == hashed)
            ).first()
        if found is None:
            self._found.pop(hashed, None)
            return None
        owner = (found[0], found[1])
        self._found[hashed] = (time.monotonic() + CACHE_SECONDS, owner)
        return owner

    def forget(self) -> None:
        """Drop every remembered key (a deployment was deleted)."""
        self._found.clear()
