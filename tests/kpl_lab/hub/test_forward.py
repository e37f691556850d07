"""Hub mode: a user's server forwards /kpl/api/* to the platform service as its user, streaming."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket

import pytest
import tornado.web
from tornado.httpclient import HTTPClientError

from kpl_lab.server_ext.forward import ForwardApp

from .conftest import serve, stop

SERVER_TOKEN = "the-servers-hub-token"


class Upstream:
    """What the fake platform service received."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.release = asyncio.Event()


@tornado.web.stream_request_body
class UpstreamHandler(tornado.web.RequestHandler):
    """Record each request; answer by path: echo, chunks, missing, slow."""

    def initialize(self, upstream: Upstream) -> None:
        self.upstream = upstream
        self.chunks: list[bytes] = []

    def data_received(self, chunk: bytes) -> None:
        self.chunks.append(chunk)

    async def _any(self, path: str) -> None:
        body = b"".join(self.chunks)
        seen = {
            "method": self.request.method,
            "path": self.request.path,
            "query": self.request.query,
            "headers": dict(self.request.headers),
            "size": len(body),
            "sha256": hashlib.sha256(body).hexdigest(),
            "pieces": len(self.chunks),
        }
        self.upstream.requests.append(seen)
        if path == "slow":
            await self.upstream.release.wait()
        if path == "missing":
            self.set_status(404)
            self.finish({"error": "NotFound", "message": "dataset 'x' not found", "field": "name"})
            return
        if path == "chunks":
            self.set_status(201)
            self.set_header("X-KPL-Test", "passed on")
            self.set_header("Content-Type", "text/plain")
            for part in (b"one ", b"two ", b"three"):
                self.write(part)
                await self.flush()
            self.finish()
            return
        self.finish(seen)

    get = post = put = delete = _any


@pytest.fixture
async def jp_asyncio_loop():
    """Run the Jupyter server on pytest-asyncio's loop, the one the tests run on."""
    return asyncio.get_running_loop()


@pytest.fixture
async def upstream():
    """Run the fake service on 127.0.0.1 and return what it saw and its URL."""
    seen = Upstream()
    server, port = await serve(
        tornado.web.Application([(r"/services/kpl/api/(?:.*/)?([^/]*)", UpstreamHandler, {"upstream": seen})])
    )
    seen.url = f"http://127.0.0.1:{port}/services/kpl/"
    yield seen
    seen.release.set()
    await stop(server)


@pytest.fixture
def jp_server_config(upstream, monkeypatch):
    """Load kpl_lab in hub mode: the service URL, the server's hub token and its project in the environment."""
    monkeypatch.setenv("KPL_SERVICE_URL", upstream.url)
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", SERVER_TOKEN)
    monkeypatch.setenv("KPL_PROJECT", "vision")
    return {
        "ServerApp": {
            "jpserver_extensions": {"kpl_lab": True, "jupyter_server_terminals": False},
            "allow_unauthenticated_access": False,
        }
    }


def forward_app(jp_serverapp) -> ForwardApp:
    app = next(iter(jp_serverapp.extension_manager.extension_apps["kpl_lab"]))
    assert isinstance(app, ForwardApp)
    return app


async def test_get_goes_to_the_service_with_the_servers_token_and_project(jp_fetch, upstream, jp_serverapp):
    response = await jp_fetch("kpl", "api", "datasets", "my data", params={"page": "2"})
    seen = json.loads(response.body)
    assert seen["method"] == "GET"
    assert seen["path"] == "/services/kpl/api/datasets/my%20data"
    assert seen["query"] == "page=2&project=vision"
    assert seen["headers"]["Authorization"] == f"token {SERVER_TOKEN}"
    assert "Cookie" not in seen["headers"]
    assert seen["headers"]["X-Kpl-Api-Base"] == "/a%40b/kpl/api"  # media URLs lead back to this server
    assert forward_app(jp_serverapp).service_url == upstream.url


async def test_the_extension_starts_without_a_platform_and_publishes_the_api_url(jp_serverapp, monkeypatch):
    monkeypatch.delenv("KPL_API_URL", raising=False)
    await forward_app(jp_serverapp)._start_jupyter_server_extension(jp_serverapp)
    assert os.environ["KPL_API_URL"].endswith("/kpl/api")


async def test_the_caller_cannot_name_the_api_base(jp_fetch):
    response = await jp_fetch("kpl", "api", "datasets", headers={"X-KPL-API-Base": "//elsewhere/api"})
    assert json.loads(response.body)["headers"]["X-Kpl-Api-Base"] == "/a%40b/kpl/api"


async def test_a_named_project_is_kept(jp_fetch):
    response = await jp_fetch("kpl", "api", "jobs", params={"project": "audio"})
    assert json.loads(response.body)["query"] == "project=audio"


async def test_the_caller_must_be_authenticated(jp_fetch, upstream):
    with pytest.raises(HTTPClientError) as error:
        await jp_fetch("kpl", "api", "datasets", headers={"Authorization": "token wrong"})
    assert error.value.code == 403
    assert upstream.requests == []


async def test_an_upload_streams_to_the_service(jp_fetch):
    body = bytes(range(256)) * (8 << 10)  # 2 MiB
    response = await jp_fetch(
        "kpl",
        "api",
        "datasets",
        method="POST",
        body=body,
        headers={"Content-Type": "application/zip", "X-Upload-Name": "digits.zip"},
    )
    seen = json.loads(response.body)
    assert (seen["method"], seen["size"]) == ("POST", len(body))
    assert seen["sha256"] == hashlib.sha256(body).hexdigest()
    assert seen["headers"]["Content-Length"] == str(len(body))
    assert seen["headers"]["X-Upload-Name"] == "digits.zip"
    assert seen["headers"]["Content-Type"] == "application/zip"


async def test_status_headers_and_chunks_come_back(jp_fetch):
    response = await jp_fetch("kpl", "api", "chunks")
    assert response.code == 201
    assert response.headers["X-KPL-Test"] == "passed on"
    assert response.headers["Content-Type"].startswith("text/plain")
    assert response.body == b"one two three"


async def test_an_error_of_the_service_is_passed_on(jp_fetch):
    with pytest.raises(HTTPClientError) as error:
        await jp_fetch("kpl", "api", "datasets", "missing")
    assert error.value.code == 404
    assert json.loads(error.value.response.body)["field"] == "name"


async def test_a_service_that_is_down_answers_502(jp_fetch, jp_serverapp):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()[1]
    forward_app(jp_serverapp).service_url = f"http://127.0.0.1:{dead}/services/kpl/"
    with pytest.raises(HTTPClientError) as error:
        await jp_fetch("kpl", "api", "datasets", method="POST", body=b"x" * 100_000)
    assert error.value.code == 502
    message = json.loads(error.value.response.body)["message"]
    assert f"the platform service at http://127.0.0.1:{dead}/services/kpl/ is unreachable" in message


async def test_a_service_that_does_not_answer_times_out_with_504(jp_fetch, jp_serverapp, upstream):
    forward_app(jp_serverapp).timeout_seconds = 0.5
    with pytest.raises(HTTPClientError) as error:
        await jp_fetch("kpl", "api", "jobs", "1", "slow")
    assert error.value.code == 504
    assert "did not answer" in json.loads(error.value.response.body)["message"]
    assert [r["path"] for r in upstream.requests] == ["/services/kpl/api/jobs/1/slow"]
