"""JupyterHub's own spawner tests, from the installed jupyterhub, run against KPLLocalSpawner (see conftest)."""

from __future__ import annotations

from pathlib import Path

import pytest
from jupyterhub.tests import test_spawner as upstream
from jupyterhub.tests.test_spawner import *  # noqa: F403

# Every test in the loop of the module's hub, as JupyterHub runs them (the mark is idle on its sync tests);
# test_shell_cmd adds the async stop() as a finalizer, which pytest never awaits (the test stops it itself)
pytestmark = [
    pytest.mark.ssl,
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.filterwarnings("ignore:The test <Function .*> is marked with '@pytest.mark.asyncio'"),
    pytest.mark.filterwarnings("ignore:coroutine 'KPLLocalSpawner.stop' was never awaited"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

# Tests of something other than the spawner that cannot pass here; docs/spawner.md gives the reason
NOT_APPLICABLE = ("test_spawner_routing",)
for _name in NOT_APPLICABLE:
    del globals()[_name]


def test_every_upstream_test_runs_here_or_is_justified_in_the_docs():
    upstream_tests = {name for name in dir(upstream) if name.startswith("test_")}
    here = {name for name in globals() if name.startswith("test_")}
    assert upstream_tests - here == set(NOT_APPLICABLE)
    doc = (Path(__file__).parents[4] / "docs" / "spawner.md").read_text()
    for name in NOT_APPLICABLE:
        assert f"`{name}`" in doc
