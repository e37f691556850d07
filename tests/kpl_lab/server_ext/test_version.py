"""GET /kpl/api/version on a real jupyter-server with the KPL Lab extension loaded."""

import asyncio
import json

import pytest
from tornado.httpclient import HTTPClientError

import kpl_lab


@pytest.fixture
async def jp_asyncio_loop():
    """Run the Jupyter server on pytest-asyncio's loop, the one the tests run on."""
    return asyncio.get_running_loop()


@pytest.fixture
def jp_server_config(jp_server_config):
    """Load the KPL Lab extension and require authentication on every endpoint."""
    return {
        "ServerApp": {
            "jpserver_extensions": {"kpl_lab": True},
            "allow_unauthenticated_access": False,
        }
    }


async def test_version_answers_name_and_version(jp_fetch):
    response = await jp_fetch("kpl", "api", "version")
    assert response.code == 200
    assert response.headers["Content-Type"].startswith("application/json")
    assert json.loads(response.body) == {"name": "kpl-lab", "version": kpl_lab.__version__}


async def test_version_refuses_requests_without_token(jp_fetch):
    with pytest.raises(HTTPClientError) as failure:
        await jp_fetch("kpl", "api", "version", headers={"Authorization": ""})
    assert failure.value.code == 403
