"""A real JupyterHub with the KPL spawner and service: projects, quotas, options, isolation, restarts."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

from .conftest import Hub, wait_for


def notebook_env(server: dict) -> dict[str, str]:
    """Return the environment of the notebook process the spawner state names."""
    return psutil.Process(server["state"]["pid"]).environ()


def test_two_users_in_two_projects_start_notebooks(hub: Hub):
    hub.add_project("vision", ["alice"], {"cpu": 2, "memory": 4096, "notebooks": 2})
    hub.add_project("audio", ["bob"], {"cpu": 2, "memory": 4096, "notebooks": 2})
    for user in ("alice", "bob"):
        assert hub.spawn(user).status_code in (201, 202)
    for user, project in (("alice", "vision"), ("bob", "audio")):
        server = hub.wait_ready(user)
        assert server["user_options"]["project"] == project
        assert server["state"]["kpl"]["project"] == project
        env = notebook_env(server)
        assert env["KPL_PROJECT"] == project
        assert env["CUDA_VISIBLE_DEVICES"] == ""  # no accelerator asked: none visible
        workspace = Path(psutil.Process(server["state"]["pid"]).cwd())
        assert workspace == hub.home / "users" / user / "workspace"
        token = hub.user_token(user)
        answer = hub.get(f"{server['url']}api/status", token)
        assert answer.status_code == 200, answer.text  # the single-user server answers through the proxy


def test_a_spawn_over_quota_is_refused_until_the_quota_is_raised(hub: Hub):
    hub.add_project("nlp", ["carol", "dan"], {"notebooks": 1})
    assert hub.spawn("carol", project="nlp").status_code in (201, 202)
    hub.wait_ready("carol")

    refused = hub.spawn("dan", project="nlp")
    assert refused.status_code == 403, refused.text
    assert "asks 1 notebook; project nlp allows 1, 1 in use" in refused.json()["message"]
    assert hub.server("dan") is None

    hub.set_quota("nlp", {"notebooks": 2})  # live, through the hub REST API
    assert hub.spawn("dan", project="nlp").status_code in (201, 202)
    assert hub.wait_ready("dan")["state"]["kpl"]["project"] == "nlp"


def test_crafted_user_options_over_the_maximum_are_refused(hub: Hub):
    hub.add_project("tabular", ["erin"], {})
    for options, says in (
        ({"profile": "small", "cpu": 64}, "cpu"),
        ({"profile": "small", "memory": 10**6}, "memory"),
        ({"profile": "small", "project": "vision"}, "not a member of project 'vision'"),
        ({"profile": "huge"}, "unknown profile 'huge'"),
        ({"profile": "small", "privileged": True}, "unknown option(s) privileged"),
    ):
        refused = hub.spawn("erin", **options)
        assert refused.status_code == 400, (options, refused.text)
        assert says in refused.json()["message"], (options, refused.text)
        assert hub.server("erin") is None
    assert hub.reservations("tabular") == []  # nothing was reserved for the refused starts


def test_the_platform_api_hides_other_projects(hub: Hub):
    hub.add_project("geo", ["frank"], {})
    hub.add_project("bio", ["grace"], {})
    frank = hub.user_token("frank")
    assert hub.get("/services/kpl/api/datasets?project=geo", frank).status_code == 200
    answer = hub.get("/services/kpl/api/datasets?project=bio", frank)
    assert answer.status_code == 404, answer.text
    assert hub.get("/services/kpl/api/datasets?project=bio", hub.user_token("grace")).status_code == 200


def test_simultaneous_spawns_never_over_allocate_the_quota(hub: Hub):
    users = [f"crowd{i:02d}" for i in range(20)]
    hub.add_project("crowd", users, {"cpu": 5})  # five notebooks of 1 CPU
    with ThreadPoolExecutor(max_workers=len(users)) as pool:
        answers = list(pool.map(lambda user: hub.spawn(user, project="crowd"), users))
    started = [user for user, answer in zip(users, answers, strict=True) if answer.status_code in (201, 202)]
    refused = [answer for answer in answers if answer.status_code == 403]
    assert (len(started), len(refused)) == (5, 15), [a.status_code for a in answers]
    assert all(a.json()["message"].startswith("asks 1 CPU; project crowd allows 5,") for a in refused)
    for user in started:
        hub.wait_ready(user)
    held = hub.reservations("crowd")
    assert sorted(owner for _, owner, _ in held) == sorted(f"{user}/" for user in started)
    assert all(hub.server(user) is None for user in set(users) - set(started))


def test_a_restarted_hub_keeps_the_devices_of_running_notebooks(make_hub):
    hub = make_hub()
    hub.start(cleanup_servers=False)
    hub.add_project("train", ["ivy", "jack", "kim"], {"gpu": 2, "notebooks": 3})
    assert hub.spawn("ivy", profile="gpu").status_code in (201, 202)
    before = hub.wait_ready("ivy")
    assert before["state"]["kpl"]["devices"] == {"gpu": [0]}
    assert notebook_env(before)["CUDA_VISIBLE_DEVICES"] == "0"
    notebook = psutil.Process(before["state"]["pid"])

    hub.stop()
    assert notebook.is_running()  # the hub left it running (cleanup_servers=False)
    hub.start()

    after = wait_for(lambda: (s := hub.server("ivy")) and s["ready"] and s, "ivy's server after the restart")
    assert after["state"]["kpl"]["devices"] == {"gpu": [0]}
    assert after["state"]["pid"] == notebook.pid
    assert hub.spawn("jack", profile="gpu").status_code in (201, 202)
    jack = hub.wait_ready("jack")
    assert jack["state"]["kpl"]["devices"] == {"gpu": [1]}  # GPU 0 is still ivy's
    assert notebook_env(jack)["CUDA_VISIBLE_DEVICES"] == "1"

    refused = hub.spawn("kim", profile="gpu")
    assert refused.status_code in (403, 409), refused.text
    assert "GPU" in refused.json()["message"]

    assert [r[1] for r in hub.reservations("train")] == ["ivy/", "jack/"]
    hub.stop_server("ivy")
    assert not notebook.is_running() or notebook.status() == psutil.STATUS_ZOMBIE
    assert hub.spawn("kim", profile="gpu").status_code in (201, 202)
    assert hub.wait_ready("kim")["state"]["kpl"]["devices"] == {"gpu": [0]}


def test_a_kernels_websocket_gets_the_subprotocol_it_asks_through_the_proxy(hub: Hub):
    hub.add_project("sockets", ["wendy"], {})
    assert hub.spawn("wendy").status_code in (201, 202)
    server = hub.wait_ready("wendy")
    token = hub.user_token("wendy")
    kernel = hub.http.post(
        f"{hub.url}{server['url']}api/kernels", headers={"Authorization": f"token {token}"}, timeout=60
    )
    assert kernel.status_code == 201, kernel.text
    url = f"ws://127.0.0.1:{hub.port}{server['url']}api/kernels/{kernel.json()['id']}/channels"

    async def chosen(subprotocols: list[str]) -> str | None:
        request = HTTPRequest(url, headers={"Authorization": f"token {token}"})
        socket = await websocket_connect(request, subprotocols=subprotocols)
        try:
            return socket.selected_subprotocol
        finally:
            socket.close()

    # as JupyterLab connects a kernel: the server's answer passes the proxy, no failed handshake
    assert asyncio.run(chosen(["v1.kernel.websocket.jupyter.org"])) == "v1.kernel.websocket.jupyter.org"
    assert asyncio.run(chosen([])) is None  # the legacy protocol, as before
