"""JupyterHub's own test fixtures, with KPLLocalSpawner in place of the spawners its spawner tests start."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import pytest_asyncio
from jupyterhub.tests import conftest as upstream
from jupyterhub.tests import mocking, test_spawner
from jupyterhub.tests.conftest import *  # noqa: F403 (JupyterHub's fixtures: app, db, user, cleanup_after ...)
from traitlets import default

from kpl_lab.spawner.local import KPLLocalSpawner

# Small enough for any machine; the tests' processes are no notebooks
PROFILE = {"slug": "default", "cpu": 0.1, "cpu_max": 1, "memory": 512, "memory_max": 1024}


class UpstreamKPLSpawner(KPLLocalSpawner):
    """KPLLocalSpawner as a hub that runs as the test's own account configures it (no OS accounts, no cgroups)."""

    @default("profiles")
    def _default_profiles(self) -> list:
        return [PROFILE]

    @default("run_as_user")
    def _default_run_as_user(self) -> bool:
        return False

    @default("use_cgroups")
    def _default_use_cgroups(self) -> bool:
        return False

    @default("environment")
    def _default_environment(self) -> dict:
        return {"JUPYTER_CONFIG_DIR": os.environ["JUPYTER_CONFIG_DIR"]}


class UpstreamKPLMockSpawner(UpstreamKPLSpawner, mocking.MockSpawner):
    """The hub's MockSpawner (its test single-user server, the API token it keeps) on KPLLocalSpawner."""


@pytest.fixture(scope="module", autouse=True)
def kpl_spawner_substituted(tmp_path_factory):
    """Put KPLLocalSpawner where JupyterHub's tests start SimpleLocalProcessSpawner and MockSpawner.

    Module-scoped (before the module's hub starts, undone after it): the rest of the session
    sees neither the patches nor the environment.
    """
    with pytest.MonkeyPatch.context() as patch:
        home = tmp_path_factory.mktemp("kpl-home")
        patch.setenv("KPL_LAB_HOME", str(home))
        # JupyterHub's tests do not run as root; a root CI lets the single-user server run as root
        config = home / "jupyter-config"
        config.mkdir()
        (config / "jupyter_server_config.py").write_text("c.ServerApp.allow_root = True\n")
        patch.setenv("JUPYTER_CONFIG_DIR", str(config))
        patch.setattr(test_spawner, "SimpleLocalProcessSpawner", UpstreamKPLSpawner)
        patch.setattr(mocking, "MockSpawner", UpstreamKPLMockSpawner)
        yield


@pytest.fixture(autouse=True)
def kpl_spawner_in_use(request):
    """Check the spawners the test made are ours (a JupyterHub change could bypass the substitution)."""
    yield
    app = mocking.MockHub.initialized() and mocking.MockHub.instance()
    if app and "app" in request.fixturenames:
        assert issubclass(app.spawner_class, KPLLocalSpawner), app.spawner_class
    assert test_spawner.SimpleLocalProcessSpawner is UpstreamKPLSpawner
    assert sys.modules["jupyterhub.tests.mocking"].MockSpawner is UpstreamKPLMockSpawner


# JupyterHub runs its async fixtures and tests in one loop per module, that of the module's hub


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def app(request, ssl_tmpdir):
    """Return JupyterHub's MockHub (its own `app` fixture), in the module's event loop; reap its proxy after.

    The hub's stop terminates the proxy without waiting: its `Popen`, collected in a later test
    as "still running", would fail that test (ResourceWarning is an error here).
    """
    proxy = None
    async for hub in upstream.app.__wrapped__(request, ssl_tmpdir):
        yield hub
        proxy = getattr(hub.proxy, "proxy_process", None)
    if proxy is not None:
        try:
            proxy.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proxy.kill()
            proxy.wait()


@pytest_asyncio.fixture(autouse=True, loop_scope="module")
async def cleanup_after(request):
    """Stop the servers a test left (JupyterHub's own `cleanup_after`), in the module's event loop."""
    async for _ in upstream.cleanup_after.__wrapped__(request):
        yield


@pytest.fixture(autouse=True)
def jp_server_cleanup():
    """Replace pytest_jupyter's cleanup of a Jupyter ServerApp: these tests start none, and it would find MockHub."""
    yield
