"""The extension app: configuration reaches the platform, kernels learn the API, stopping kills no job."""

import asyncio
import os

from traitlets.config import Config

from kpl_lab.platform import Platform

from .test_jobs_api import WAIT, add_algorithm


def kpl_app(jp_serverapp):
    return next(iter(jp_serverapp.extension_manager.extension_apps["kpl_lab"]))


async def test_settings_reach_the_platform_and_the_environment(jp_serverapp, kpl_home):
    app = kpl_app(jp_serverapp)
    assert app.platform.home == str(kpl_home)
    ledger = app.platform.jobs.ledger
    assert (ledger.cpu, ledger.memory, ledger.capacity()["devices"]) == (2.0, 2048, {"gpu": [0]})
    assert os.environ["KPL_API_URL"] == jp_serverapp.connection_url.rstrip("/") + "/kpl/api"
    assert os.environ["KPL_API_TOKEN"] == jp_serverapp.identity_provider.token


async def test_stopping_the_server_leaves_jobs_running_and_a_new_one_finds_them(
    api, jp_serverapp, kpl_home, tmp_path
):
    release = tmp_path / "release"
    await add_algorithm(api, "waiter", WAIT.replace("RELEASE_FILE", str(release)))
    _, job = await api.post("jobs", {"algorithm": "waiter"})
    await api.wait_job(job["id"], states=("running",))
    await kpl_app(jp_serverapp).stop_extension()

    later = Platform(home=str(kpl_home), config=Config({"Ledger": {"cpu": 2.0, "memory": 2048}}))
    try:
        assert later.jobs.reconcile() == {job["id"]: "running"}
        release.touch()
        while not later.jobs.get("default", job["id"]).is_final:
            await asyncio.sleep(0.1)
        assert later.jobs.get("default", job["id"]).state == "succeeded"
    finally:
        later.close()
