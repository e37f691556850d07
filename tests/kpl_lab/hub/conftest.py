"""Fixtures of the hub unit tests: a fake JupyterHub REST API and the platform service against it."""

from __future__ import annotations

import asyncio
import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import tornado.web
from jupyter_server.base.handlers import JupyterHandler
from tornado.httpclient import AsyncHTTPClient, HTTPResponse
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets
from tornado.web import create_signed_value
from traitlets.config import Config

from kpl_lab.hub.service import KPLService

SERVICE_TOKEN = "service-token"
ACCESS = "access:services!service=kpl"
COOKIE_NAME = "service-kpl"

USERS = {
    "admin": {"admin": True, "groups": ["demo"]},
    "alice": {"admin": False, "groups": ["vision"]},
    "bob": {"admin": False, "groups": ["audio"]},
    "carol": {"admin": False, "groups": []},
}
GROUPS = {
    "demo": {"kpl_quota": {"cpu": 4, "memory": 8192, "gpu": 0, "notebooks": 3}},
    "vision": {"kpl_quota": {"cpu": 8, "gpu": 1}},
    "audio": {},
}


@dataclass
class FakeHub:
    """The users, groups and tokens the fake hub API answers from, and what it was asked."""

    url: str = ""
    users: dict[str, dict] = field(default_factory=lambda: copy.deepcopy(USERS))
    groups: dict[str, dict] = field(default_factory=lambda: copy.deepcopy(GROUPS))
    # token -> (user name, scopes)
    tokens: dict[str, tuple[str, list[str]]] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)

    def token(self, user: str, scopes: tuple[str, ...] = (ACCESS,)) -> str:
        """Return a new token of a user with these scopes."""
        value = f"token-{user}-{len(self.tokens)}"
        self.tokens[value] = (user, list(scopes))
        return value

    def user_model(self, name: str) -> dict:
        """Return the hub's model of a user."""
        return {"kind": "user", "name": name, "servers": {}, **self.users[name]}

    def group_model(self, name: str) -> dict:
        """Return the hub's model of a group."""
        members = [user for user, model in self.users.items() if name in model["groups"]]
        return {"kind": "group", "name": name, "users": members, "properties": self.groups[name]}


class FakeHubHandler(tornado.web.RequestHandler):
    """Answer the few hub API calls the service makes, checking who makes them."""

    def initialize(self, hub: FakeHub) -> None:
        self.hub = hub

    def caller_token(self) -> str:
        header = self.request.headers.get("Authorization", "")
        return header.removeprefix("token ").strip()

    def answer(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(data))

    def prepare(self) -> None:
        self.hub.calls.append((self.request.method, self.request.path))
        if self.request.path.rstrip("/") == "/hub/api/user":
            return
        if self.request.method == "GET" and self.caller_token() == SERVICE_TOKEN:
            return  # the service reads with its own token
        # an admin's own token reads and changes users and groups; the service's may only read
        owner = self.hub.tokens.get(self.caller_token())
        if owner is None or not self.hub.users.get(owner[0], {}).get("admin"):
            self.answer({"status": 403, "message": "not the service's token, nor an admin's"}, 403)

    def get(self, path: str) -> None:
        parts = path.strip("/").split("/")
        if parts == ["user"]:
            owner = self.hub.tokens.get(self.caller_token())
            if owner is None:
                return self.answer({"status": 403, "message": "invalid token"}, 403)
            name, scopes = owner
            return self.answer({**self.hub.user_model(name), "scopes": scopes})
        if parts == ["users"]:
            return self.answer([self.hub.user_model(name) for name in self.hub.users])
        if parts[0] == "users" and len(parts) == 2:
            if parts[1] not in self.hub.users:
                return self.answer({"status": 404, "message": "no such user"}, 404)
            return self.answer(self.hub.user_model(parts[1]))
        if parts == ["groups"]:
            return self.answer([self.hub.group_model(name) for name in self.hub.groups])
        if parts[0] == "groups" and len(parts) == 2:
            if parts[1] not in self.hub.groups:
                return self.answer({"status": 404, "message": "no such group"}, 404)
            return self.answer(self.hub.group_model(parts[1]))
        return self.answer({"status": 404, "message": path}, 404)

    def put(self, path: str) -> None:
        parts = path.strip("/").split("/")
        if (
            len(parts) == 3
            and parts[0] == "groups"
            and parts[2] == "properties"
            and parts[1] in self.hub.groups
        ):
            self.hub.groups[parts[1]] = json.loads(self.request.body)
            return self.answer(self.hub.group_model(parts[1]))
        return self.answer({"status": 404, "message": path}, 404)


async def serve(app: tornado.web.Application) -> tuple[HTTPServer, int]:
    """Serve an app on a port of 127.0.0.1 chosen now; return the server and the port."""
    sockets = bind_sockets(0, "127.0.0.1")
    server = HTTPServer(app)
    server.add_sockets(sockets)
    return server, sockets[0].getsockname()[1]


async def stop(server: HTTPServer) -> None:
    """Stop a server and close its open connections."""
    server.stop()
    await server.close_all_connections()


@pytest.fixture
async def fake_hub():
    """Run the fake hub API on 127.0.0.1 and return it."""
    hub = FakeHub()
    server, port = await serve(tornado.web.Application([(r"/hub/api/(.*)", FakeHubHandler, {"hub": hub})]))
    hub.url = f"http://127.0.0.1:{port}/hub/api"
    yield hub
    await stop(server)


@pytest.fixture
def restore_xsrf_patch():
    """Undo HubOAuth's patch of JupyterHandler's xsrf methods, so other tests see jupyter_server's own."""
    names = ("check_xsrf_cookie", "_xsrf_token_id", "xsrf_token")
    saved = {name: JupyterHandler.__dict__.get(name) for name in names}
    yield
    for name, value in saved.items():
        if value is None:
            if name in JupyterHandler.__dict__:
                delattr(JupyterHandler, name)
        else:
            setattr(JupyterHandler, name, value)


@dataclass
class Service:
    """The platform service under test and how to call it."""

    app: KPLService
    web: tornado.web.Application
    url: str
    hub: FakeHub

    async def call(
        self,
        method: str,
        path: str,
        *,
        token: str | None = None,
        body: Any = None,
        headers: dict | None = None,
    ) -> tuple[int, Any, HTTPResponse]:
        """Return (status, parsed JSON or text, response) of a request to /services/kpl/<path>."""
        headers = dict(headers or {})
        if token:
            headers["Authorization"] = f"token {token}"
        if body is not None and not isinstance(body, bytes):
            body = json.dumps(body).encode()
        if body is None and method in ("PUT", "POST"):
            body = b""
        response = await AsyncHTTPClient().fetch(
            self.url + path.lstrip("/"),
            method=method,
            body=body,
            headers=headers,
            raise_error=False,
            follow_redirects=False,
        )
        text = response.body.decode(errors="replace")  # images come back as bytes in response.body
        try:
            data = json.loads(text) if text else None
        except ValueError:
            data = text
        return response.code, data, response

    def cookie(self, token: str) -> str:
        """Return the signed OAuth cookie a browser holds after logging in with this token."""
        value = create_signed_value(self.web.settings["cookie_secret"], COOKIE_NAME, token)
        return f"{COOKIE_NAME}={value.decode()}"


def as_hub_service(monkeypatch, hub: FakeHub, port: int) -> None:
    """Set the environment the hub gives its managed service `kpl` listening on `port`."""
    for name, value in {
        "JUPYTERHUB_API_URL": hub.url,
        "JUPYTERHUB_API_TOKEN": SERVICE_TOKEN,
        "JUPYTERHUB_CLIENT_ID": COOKIE_NAME,
        "JUPYTERHUB_SERVICE_NAME": "kpl",
        "JUPYTERHUB_SERVICE_PREFIX": "/services/kpl/",
        "JUPYTERHUB_SERVICE_URL": f"http://127.0.0.1:{port}",
        "JUPYTERHUB_BASE_URL": "/",
        "JUPYTERHUB_HOST": "",
        "JUPYTERHUB_OAUTH_CALLBACK_URL": "/services/kpl/oauth_callback",
        "JUPYTERHUB_OAUTH_ACCESS_SCOPES": json.dumps([ACCESS]),
    }.items():
        monkeypatch.setenv(name, value)


def service_config(home: Path, database_url: str | None) -> Config:
    """Return the service's configuration: its home, the catalog, a 4-CPU ledger without GPUs."""
    config = Config()
    config.Platform.home = str(home)
    if database_url:  # else the platform's SQLite under its home
        config.Platform.database_url = database_url
    config.Ledger.cpu, config.Ledger.memory, config.Ledger.devices = 4.0, 4096, {"gpu": []}
    return config


@pytest.fixture
async def service(fake_hub, tmp_path, monkeypatch, restore_xsrf_patch, database_url):
    """Run the platform service on 127.0.0.1 against the fake hub, with its home in tmp_path."""
    sockets = bind_sockets(0, "127.0.0.1")
    port = sockets[0].getsockname()[1]
    as_hub_service(monkeypatch, fake_hub, port)
    config = service_config(tmp_path / "kpl-home", database_url)
    app = KPLService(config=config)
    app.setup()
    web = app.web_app()
    server = app.http_server(web)
    server.add_sockets(sockets)
    try:
        yield Service(app, web, f"http://127.0.0.1:{port}/services/kpl/", fake_hub)
    finally:
        await stop(server)
        app.imports.shutdown()
        await asyncio.get_running_loop().run_in_executor(None, app.pool.shutdown)
        app.monitor.close()
        app.platform.close()
