"""The platform service: callers identified by the hub, projects are their groups, others are not found."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import threading

import pytest
from tornado.httpclient import AsyncHTTPClient

from kpl_lab.hub.service import KPLService
from kpl_lab.hub.up import free_port

from ..server_ext.conftest import imagefolder_zip
from .conftest import as_hub_service, service_config

pytestmark = pytest.mark.databases


async def test_version_answers_a_member(service):
    status, body, _ = await service.call("GET", "api/version", token=service.hub.token("alice"))
    assert status == 200
    assert body["version"]


async def test_anonymous_api_call_is_refused(service):
    status, _, _ = await service.call("GET", "api/datasets?project=vision")
    assert status == 403


async def test_unknown_token_is_refused(service):
    status, _, _ = await service.call("GET", "api/datasets?project=vision", token="not-a-token")
    assert status == 403


async def test_token_without_the_access_scope_is_refused(service):
    token = service.hub.token("alice", scopes=("read:users!user=alice",))
    status, _, _ = await service.call("GET", "api/datasets?project=vision", token=token)
    assert status == 403


async def test_member_sees_their_groups_projects(service, tmp_path):
    weights = tmp_path / "weights.bin"
    weights.write_bytes(b"\x00" * 16)
    service.app.platform.catalog.add_model("vision", "resnet", weights)
    status, body, _ = await service.call("GET", "api/models?project=vision", token=service.hub.token("alice"))
    assert status == 200, body
    assert [model["name"] for model in body["models"]] == ["resnet"]
    status, body, _ = await service.call(
        "GET", "api/models/resnet?project=vision", token=service.hub.token("bob")
    )
    assert status == 404, body


@pytest.mark.parametrize("project", ["audio", "demo", "default"])
async def test_another_project_is_not_found(service, project):
    status, body, _ = await service.call(
        "GET", f"api/datasets?project={project}", token=service.hub.token("alice")
    )
    assert status == 404, body
    assert body["field"] == "project"
    assert project in body["message"]


async def test_other_project_job_submission_is_not_found(service):
    token = service.hub.token("alice")
    status, body, _ = await service.call(
        "POST", "api/jobs?project=audio", token=token, body={"algorithm": "x", "function": "train"}
    )
    assert status == 404, body
    assert body["field"] == "project"


async def test_user_of_no_group_uses_the_default_project(service):
    token = service.hub.token("carol")
    assert (await service.call("GET", "api/datasets?project=default", token=token))[0] == 200
    assert (await service.call("GET", "api/datasets?project=vision", token=token))[0] == 404


async def test_admin_sees_every_project(service):
    token = service.hub.token("admin")
    for project in ("demo", "vision", "audio", "default"):
        status, body, _ = await service.call("GET", f"api/datasets?project={project}", token=token)
        assert status == 200, (project, body)


async def test_group_change_in_the_hub_applies(service):
    token = service.hub.token("alice")
    assert (await service.call("GET", "api/datasets?project=audio", token=token))[0] == 404
    service.hub.users["alice"]["groups"].append("audio")
    service.app.directory._users.clear()  # the directory caches a user a few seconds
    assert (await service.call("GET", "api/datasets?project=audio", token=token))[0] == 200


async def test_browser_without_login_is_sent_to_the_hub(service):
    status, _, response = await service.call("GET", "admin")
    assert status == 302
    location = response.headers["Location"]
    assert re.search(r"/hub/api/oauth2/authorize\?.*client_id=service-kpl", location), location


async def test_media_urls_lead_to_where_the_caller_reaches_the_api(service):
    token = service.hub.token("alice")
    status, version, _ = await service.call(
        "POST",
        "api/datasets?project=vision&name=pets&format=imagefolder&filename=pets.zip",
        token=token,
        body=imagefolder_zip(),
        headers={"Content-Type": "application/octet-stream"},
    )
    assert status == 201, version
    records = f"api/datasets/pets/versions/{version['version']}/records?project=vision&limit=1"
    status, page, _ = await service.call("GET", records, token=token)
    assert status == 200, page
    content = page["records"][0]["fields"]["content"]
    # called directly (Client(hub_url, token)): the service's own prefix, once
    assert content["thumbnail"].startswith("/services/kpl/api/datasets/pets/versions/")
    assert "token" not in content["thumbnail"]
    status, image, response = await service.call(
        "GET", content["thumbnail"].removeprefix("/services/kpl/"), token=token
    )
    assert status == 200 and response.headers["Content-Type"] == "image/png"
    # forwarded by alice's server: under that server, where her browser's cookie is valid
    status, page, _ = await service.call(
        "GET", records, token=token, headers={"X-KPL-API-Base": "/user/alice/kpl/api"}
    )
    assert page["records"][0]["fields"]["content"]["url"].startswith("/user/alice/kpl/api/datasets/pets/")


def test_importing_the_service_loads_neither_jupyter_server_nor_the_platform():
    # what the hub's service timeout once ran out on: seconds of imports before the service listened
    heavy = ("jupyter_server", "jupyterhub.singleuser", "sqlalchemy", "pyarrow", "kpl_lab.platform")
    check = f"import sys, kpl_lab.hub.service; print([m for m in {heavy!r} if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


async def get(url: str) -> tuple[int, dict]:
    """Return the status and headers of GET `url`, or (0, {}) while nothing listens there."""
    try:
        response = await AsyncHTTPClient().fetch(url, raise_error=False, follow_redirects=False)
    except OSError:
        return 0, {}
    return response.code, response.headers


async def test_the_service_answers_the_hub_before_it_has_loaded_then_serves(
    fake_hub, tmp_path, monkeypatch, restore_xsrf_patch
):
    port = free_port()
    as_hub_service(monkeypatch, fake_hub, port)
    app = KPLService(config=service_config(tmp_path / "kpl-home", None))
    loading, load = threading.Event(), threading.Event()
    setup = app.setup

    def slow_setup():  # the imports and the database of a busy machine
        loading.set()
        assert load.wait(60)
        setup()

    monkeypatch.setattr(app, "setup", slow_setup)
    serving = asyncio.create_task(app.serve())
    root, api = f"http://127.0.0.1:{port}/", f"http://127.0.0.1:{port}/services/kpl/api/version"
    try:
        deadline = asyncio.get_running_loop().time() + 60  # a bound on a hang, not a measure of speed
        while not loading.is_set() or (await get(root))[0] == 0:
            assert not serving.done(), serving.exception()
            assert asyncio.get_running_loop().time() < deadline, "the service does not listen while it loads"
            await asyncio.sleep(0.05)
        # the hub counts any answer below 500 at the service's URL as up; the API says to try again
        assert (await get(root))[0] == 404
        status, headers = await get(api)
        assert status == 503 and headers["Retry-After"] == "2"
        load.set()
        while (status := (await get(api))[0]) == 503:
            await asyncio.sleep(0.05)
        assert status == 403  # the platform's own answer to a caller without a token
    finally:
        load.set()
        while not hasattr(app, "_stop"):
            await asyncio.sleep(0.05)
        app.request_stop()
        await asyncio.wait_for(serving, 60)


async def test_a_service_that_fails_to_load_exits_with_the_error(fake_hub, tmp_path, monkeypatch):
    as_hub_service(monkeypatch, fake_hub, free_port())
    app = KPLService(config=service_config(tmp_path / "kpl-home", "nosuchdriver://x"))
    with pytest.raises(Exception, match="nosuchdriver"):
        await asyncio.wait_for(app.serve(), 60)
