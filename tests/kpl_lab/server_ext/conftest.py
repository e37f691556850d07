"""Fixtures of the REST API tests: a real jupyter-server with kpl_lab on a tmp home, and a client."""

from __future__ import annotations

import asyncio
import io
import json
import zipfile
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

UPLOAD_LIMIT = 4 << 20
WAIT_SECONDS = 120


@pytest.fixture
async def jp_asyncio_loop():
    """Run the Jupyter server on pytest-asyncio's loop, the one the tests run on."""
    return asyncio.get_running_loop()


@pytest.fixture
def kpl_home(tmp_path) -> Path:
    """Return the platform home of the server under test."""
    return tmp_path / "kpl-home"


@pytest.fixture
def jp_server_config(kpl_home):
    """Load kpl_lab on a tmp home with a small declared machine; require authentication everywhere."""
    return {
        "ServerApp": {
            # terminals register a websocket without an auth decorator: a warning, hence an error here
            "jpserver_extensions": {"kpl_lab": True, "jupyter_server_terminals": False},
            "allow_unauthenticated_access": False,
        },
        "Platform": {"home": str(kpl_home)},
        "Ledger": {
            "cpu": 2.0,
            "memory": 2048,
            "devices": {"gpu": [{"index": 0, "name": "Test GPU", "memory_mb": 1024}]},
        },
        "KPLLab": {
            "projects": ["default", "other"],
            "max_upload_bytes": UPLOAD_LIMIT,
            "poll_seconds": 0.2,
        },
        "JobService": {"grace_seconds": 1.0},
        "LocalExecutor": {"tick_seconds": 0.2},
    }


class Api:
    """Call /kpl/api/ and get (status, parsed body) back, errors included."""

    def __init__(self, fetch) -> None:
        self.fetch = fetch

    async def raw(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers=None,
        streaming_callback=None,
        **params: Any,
    ):
        """Return the tornado response of a request."""
        query = {k: v for k, v in params.items() if v is not None}
        parts = ["kpl", "api", *path.strip("/").split("/")]
        kwargs: dict[str, Any] = {"method": method, "raise_error": False, "request_timeout": 120}
        if query:
            kwargs["params"] = query
        if headers is not None:
            kwargs["headers"] = headers
        if streaming_callback is not None:
            kwargs["streaming_callback"] = streaming_callback
        if body is not None or method in ("POST", "PUT"):
            kwargs["body"] = body if body is not None else b""
        return await self.fetch(*parts, **kwargs)

    async def call(self, method: str, path: str, json_body: Any = None, **params: Any) -> tuple[int, Any]:
        """Return (status, JSON body)."""
        body = json.dumps(json_body).encode() if json_body is not None else None
        response = await self.raw(method, path, body, **params)
        text = response.body.decode() if response.body else ""
        return response.code, (json.loads(text) if text else None)

    async def get(self, path: str, **params: Any) -> tuple[int, Any]:
        return await self.call("GET", path, **params)

    async def post(self, path: str, json_body: Any = None, **params: Any) -> tuple[int, Any]:
        return await self.call("POST", path, json_body, **params)

    async def delete(self, path: str, **params: Any) -> tuple[int, Any]:
        return await self.call("DELETE", path, **params)

    async def upload(self, path: str, data: bytes, **params: Any) -> tuple[int, Any]:
        response = await self.raw("POST", path, data, **params)
        return response.code, json.loads(response.body)

    async def wait_job(
        self, job_id: str, states=("succeeded", "failed", "stopped", "lost"), **params
    ) -> dict:
        """Poll a job until it reaches one of `states`."""
        deadline = asyncio.get_running_loop().time() + WAIT_SECONDS
        while asyncio.get_running_loop().time() < deadline:
            code, job = await self.get(f"jobs/{job_id}", **params)
            assert code == 200, job
            if job["state"] in states:
                return job
            await asyncio.sleep(0.2)
        raise AssertionError(f"job {job_id} still {job['state']} after {WAIT_SECONDS} s")

    async def wait_deployment(self, name: str, **params) -> dict:
        """Poll a deployment until it is ready or failed."""
        deadline = asyncio.get_running_loop().time() + WAIT_SECONDS
        while asyncio.get_running_loop().time() < deadline:
            code, deployment = await self.get(f"deployments/{name}", **params)
            assert code == 200, deployment
            if deployment["state"] in ("ready", "failed"):
                return deployment
            await asyncio.sleep(0.2)
        raise AssertionError(f"deployment {name} still {deployment['state']} after {WAIT_SECONDS} s")

    async def wait_experiment(self, name: str) -> dict:
        """Poll an experiment until the server's background rounds have finished it."""
        deadline = asyncio.get_running_loop().time() + WAIT_SECONDS
        while asyncio.get_running_loop().time() < deadline:
            code, experiment = await self.get(f"experiments/{name}")
            assert code == 200, experiment
            if experiment["state"] != "running":
                return experiment
            await asyncio.sleep(0.2)
        jobs = (await self.get("jobs"))[1]
        raise AssertionError(f"experiment {name} still running after {WAIT_SECONDS} s: {experiment} {jobs}")


@pytest.fixture
def api(jp_fetch) -> Api:
    """Return the API client of the server under test."""
    return Api(jp_fetch)


def png(width: int = 8, height: int = 6, color=(200, 30, 30)) -> bytes:
    """Return a small PNG image."""
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (width, height), color).save(out, format="PNG")
    return out.getvalue()


def zip_bytes(files: dict[str, bytes]) -> bytes:
    """Return a zip archive of name -> content."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return out.getvalue()


def imagefolder_zip() -> bytes:
    """Return an ImageFolder zip: 3 cats, 2 dogs."""
    files = {f"cat/{i}.png": png(color=(i * 40, 10, 10)) for i in range(3)}
    files |= {f"dog/{i}.png": png(40, 30, color=(10, i * 60, 10)) for i in range(2)}
    return zip_bytes(files)


def query(**params: Any) -> str:
    return urlencode(params)
