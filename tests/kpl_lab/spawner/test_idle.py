"""The idle policy: GPU utilization counts as activity, not only the browser."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from traitlets.config import Config

from kpl_lab.engine.launch import Resources
from kpl_lab.engine.ledger import Ledger
from kpl_lab.platform import Platform
from kpl_lab.spawner.idle import IdlePolicy, Notebook, notebook_gpus, notebooks_from_hub
from kpl_lab.spawner.quota import reserve_notebook

from .conftest import GPUS

T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)


class FakeNvml:
    """Utilisation per GPU index, as NVML would answer; records what was asked."""

    def __init__(self, percent: dict[int, float]):
        self.percent = percent
        self.asked: list[list[int]] = []

    def __call__(self, indexes):
        indexes = list(indexes)
        self.asked.append(indexes)
        return {i: self.percent[i] for i in indexes if i in self.percent}


def test_browser_quiet_but_gpu_busy_is_not_idle():
    nvml = FakeNvml({0: 97.0, 1: 0.0})
    policy = IdlePolicy(timeout_s=3600, reader=nvml)
    training = Notebook("alice", "", T0, gpus=(0,))
    forgotten = Notebook("bob", "", T0, gpus=(1,))
    browsing = Notebook("carol", "", T0 + timedelta(minutes=50))
    later = T0 + timedelta(hours=1, minutes=1)
    assert policy.idle([training, forgotten, browsing], later) == [forgotten]
    assert nvml.asked == [[0, 1]]
    # the training finished: an hour after the last busy sample it is idle too
    nvml.percent[0] = 0.0
    assert policy.idle([training], later + timedelta(minutes=30)) == []
    assert policy.idle([training], later + timedelta(hours=1)) == [training]


def test_no_gpus_means_browser_activity_only():
    nvml = FakeNvml({})
    policy = IdlePolicy(timeout_s=60, reader=nvml)
    notebook = Notebook("alice", "", T0)
    assert policy.idle([notebook], T0 + timedelta(seconds=59)) == []
    assert policy.idle([notebook], T0 + timedelta(seconds=60)) == [notebook]
    assert nvml.asked == []  # nothing to sample


def test_timeout_must_be_positive():
    with pytest.raises(ValueError, match="timeout_s: expected seconds > 0, got 0"):
        IdlePolicy(timeout_s=0)


def test_notebooks_from_the_hub_answer_with_their_ledger_gpus(tmp_path):
    platform = Platform(
        home=str(tmp_path / "home"), config=Config({"Ledger": {"cpu": 8.0, "memory": 8192, "devices": GPUS}})
    )
    try:
        ledger = Ledger(platform)
        reserve_notebook(ledger, "v", "alice/", Resources(devices={"gpu": 2}))
        reserve_notebook(ledger, "v", "bob/lab", Resources(devices={"gpu": 1}), sharing=True)
        gpus = notebook_gpus(platform)
    finally:
        platform.close()
    assert gpus == {"alice/": (0, 1), "bob/lab": (2,)}
    users = [
        {"name": "alice", "servers": {"": {"ready": True, "last_activity": "2025-01-01T00:00:00Z"}}},
        {"name": "bob", "servers": {"lab": {"ready": True, "last_activity": None}, "x": {"ready": False}}},
    ]
    assert notebooks_from_hub(users, gpus) == [
        Notebook("alice", "", T0, (0, 1)),
        Notebook("bob", "lab", None, (2,)),
    ]


async def test_cull_once_stops_only_idle_notebooks_through_the_hub_api(tmp_path):
    import json

    from tornado import httpserver, netutil, web

    from kpl_lab.spawner.idle import cull_once

    deleted, tokens = [], []
    recent = (datetime.now(timezone.utc) - timedelta(seconds=5)).isoformat()

    class Users(web.RequestHandler):
        def get(self):
            tokens.append(self.request.headers.get("Authorization"))
            self.write(
                json.dumps(
                    [
                        {
                            "name": "alice",
                            "servers": {"": {"ready": True, "last_activity": "2025-01-01T00:00:00Z"}},
                        },
                        {"name": "bob", "servers": {"": {"ready": True, "last_activity": recent}}},
                    ]
                )
            )

    class Server(web.RequestHandler):
        def delete(self, user, server):
            deleted.append(f"{user}/{server}")
            self.set_status(204)

    app = web.Application([(r"/hub/api/users", Users), (r"/hub/api/users/([^/]+)/servers/(.*)", Server)])
    [sock] = netutil.bind_sockets(0, "127.0.0.1")
    server = httpserver.HTTPServer(app)
    server.add_sockets([sock])
    platform = Platform(home=str(tmp_path / "home"))
    try:
        port = sock.getsockname()[1]
        stopped = await cull_once(
            IdlePolicy(timeout_s=3600, reader=FakeNvml({})),
            f"http://127.0.0.1:{port}/hub/api",
            "secret",
            platform,
        )
    finally:
        server.stop()
        await server.close_all_connections()
        platform.close()
    assert stopped == ["alice/"] and deleted == ["alice/"]
    assert tokens == ["token secret"]
