"""GET /kpl/api/version on a real jupyter-server with the KPL Lab extension loaded (see conftest.py)."""

import json

import pytest
from tornado.httpclient import HTTPClientError

import kpl_lab


async def test_version_answers_name_and_version(jp_fetch):
    response = await jp_fetch("kpl", "api", "version")
    assert response.code == 200
    assert response.headers["Content-Type"].startswith("application/json")
    assert json.loads(response.body) == {"name": "kpl-lab", "version": kpl_lab.__version__}


async def test_version_refuses_requests_without_token(jp_fetch):
    with pytest.raises(HTTPClientError) as failure:
        await jp_fetch("kpl", "api", "version", headers={"Authorization": ""})
    assert failure.value.code == 403
