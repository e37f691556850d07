"""A hub-less spawner under test: a user with groups (projects), a hub address, a platform in tmp_path."""

from __future__ import annotations

import sys
import textwrap
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
from traitlets.config import Config

from kpl_lab.spawner.local import KPLLocalSpawner

GPUS = {"gpu": [{"index": 0}, {"index": 1}, {"index": 2}]}

PROFILES = [
    {"slug": "cpu", "display_name": "CPU only", "cpu": 1, "cpu_max": 4, "memory": 512, "memory_max": 4096},
    {
        "slug": "gpu",
        "display_name": "One GPU",
        "cpu": 2,
        "cpu_max": 4,
        "memory": 1024,
        "memory_max": 8192,
        "accelerator": "gpu",
        "accelerators": 1,
        "accelerators_max": 2,
        "projects": ["vision"],
    },
    {
        "slug": "shared",
        "display_name": "Shared GPU",
        "memory": 256,
        "memory_max": 1024,
        "accelerator": "gpu",
        "accelerators": 1,
        "accelerators_max": 1,
        "gpu_sharing": True,
    },
]

# The "server": writes what it sees (env, cwd, cgroup, memory rlimit) and waits to be stopped.
PROBE = textwrap.dedent(
    """
    import json, os, resource, sys, time
    report = {
        "env": dict(os.environ),
        "cwd": os.getcwd(),
        "cgroup": open("/proc/self/cgroup").read(),
        "rlimit_data": resource.getrlimit(resource.RLIMIT_DATA)[0],
        "argv": sys.argv[1:],
    }
    out = os.environ["PROBE_OUT"]
    with open(out + ".tmp", "w") as f:
        json.dump(report, f)
    os.replace(out + ".tmp", out)
    time.sleep(600)
    """
)


@dataclass
class Group:
    name: str
    properties: dict = field(default_factory=dict)


def make_user(name: str, *groups: Group) -> SimpleNamespace:
    return SimpleNamespace(name=name, groups=list(groups), url=f"/user/{name}/", id=1, escaped_name=name)


@pytest.fixture
def hub():
    return SimpleNamespace(
        api_url="http://127.0.0.1:1/hub/api",
        base_url="/hub/",
        public_host="",
        url="http://127.0.0.1:1/hub/",
        host="",
    )


@pytest.fixture
def config(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    return Config(
        {
            "Platform": {"home": str(tmp_path / "home")},
            "Ledger": {"cpu": 8.0, "memory": 16384, "devices": GPUS},
            "KPLLocalSpawner": {
                "profiles": PROFILES,
                "cmd": [sys.executable, str(probe)],
                "env_keep": ["PATH", "PROBE_OUT"],
            },  # no privileged helper: as the test's account (tests/hub/test_isolation.py: as the user's)
        }
    )


@pytest.fixture
def make_spawner(config, hub, tmp_path, monkeypatch):
    """Return a factory of spawners; every platform they opened is closed afterwards."""
    spawners = []

    def make(user, name: str = "", **traits) -> KPLLocalSpawner:
        spawner = KPLLocalSpawner(user=user, hub=hub, name=name, config=config, **traits)
        spawners.append(spawner)
        return spawner

    yield make
    for key, platform in list(KPLLocalSpawner._platforms.items()):
        if key[0].startswith(str(tmp_path)):
            platform.close()
            del KPLLocalSpawner._platforms[key]
