"""A real hub run as root: alice's notebook and jobs run as her account and read her project only."""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import pwd
import re
import subprocess
import textwrap
import uuid
from pathlib import Path

import psutil
import pytest
import requests
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

from kpl_lab.engine.identity import account_name

from .conftest import Hub, wait_for

# the kernel, the job and the deployment report what each path gives them: "read" or "refused",
# and whether they can rename the platform's folders (to put a link in their place): "renamed" or "refused"
PROBE = textwrap.dedent(
    """
    import json, os
    def probe(path):
        try:
            os.listdir(path) if os.path.isdir(path) else open(path, "rb").read(1)
            return "read"
        except PermissionError:
            return "refused"
    def moved(path):
        try:
            os.rename(path, path + ".moved")
        except PermissionError:
            return "refused"
        os.rename(path + ".moved", path)
        return "renamed"
    print("PROBE " + json.dumps({
        "uid": os.getuid(),
        **{key: probe(path) for key, path in PATHS.items()},
        **{key: moved(path) for key, path in RENAMES.items()},
    }))
    """
)


async def run_in_kernel(hub: Hub, server_url: str, token: str, code: str) -> str:
    """Start a kernel in the user's server, run `code` over its websocket, return what it printed."""
    kernel = hub.http.post(
        f"{hub.url}{server_url}api/kernels", headers={"Authorization": f"token {token}"}, timeout=60
    )
    assert kernel.status_code == 201, kernel.text
    url = f"ws://127.0.0.1:{hub.port}{server_url}api/kernels/{kernel.json()['id']}/channels"
    socket = await websocket_connect(HTTPRequest(url, headers={"Authorization": f"token {token}"}))
    msg_id = uuid.uuid4().hex
    header = {
        "msg_id": msg_id,
        "msg_type": "execute_request",
        "session": msg_id,
        "username": "",
        "version": "5.3",
    }
    content = {
        "code": code,
        "silent": False,
        "store_history": False,
        "allow_stdin": False,
        "stop_on_error": True,
    }
    socket.write_message(
        json.dumps(
            {"header": header, "parent_header": {}, "metadata": {}, "content": content, "channel": "shell"}
        )
    )
    printed = []
    while True:
        message = json.loads(await asyncio.wait_for(socket.read_message(), 120))
        if message.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        kind = message["header"]["msg_type"]
        if kind == "stream":
            printed.append(message["content"]["text"])
        elif kind == "error":
            printed.append("\n".join(message["content"]["traceback"]))
        elif kind == "status" and message["content"]["execution_state"] == "idle":
            socket.close()
            return "".join(printed)


def probed(text: str) -> dict:
    """Return the probe's report in printed text."""
    line = next((line for line in text.splitlines() if line.startswith("PROBE ")), None)
    assert line is not None, text
    return json.loads(line.removeprefix("PROBE "))


def add_dataset_file(home: Path, project: str) -> Path:
    """Put a dataset file in a project's storage (as the catalog lays datasets out)."""
    folder = home / "storage" / "projects" / project / "datasets" / "sample" / "1"
    folder.mkdir(parents=True)
    (folder / "part-0.txt").write_text(f"{project} data")
    return folder / "part-0.txt"


@pytest.fixture
def isolated_hub(open_folder: Path, user_python: str, account_prefix: str):
    """Return a started hub whose notebooks and jobs run as their users (like `kpl-lab up` as root)."""
    hub = Hub(open_folder / "hub", user_python=user_python, account_prefix=account_prefix)
    try:
        yield hub
    finally:
        hub.close()


def test_notebooks_and_jobs_run_as_their_users(isolated_hub: Hub):
    hub = isolated_hub
    home = hub.home
    mine, theirs = add_dataset_file(home, "vision"), add_dataset_file(home, "audio")
    hub.start()
    hub.add_project("vision", ["alice"], {})
    hub.add_project("audio", ["bob"], {})
    for user in ("alice", "bob"):
        assert hub.spawn(user).status_code in (201, 202)
    server = hub.wait_ready("alice")
    hub.wait_ready("bob")
    hub.stop_server("bob")  # his home stays; his CPU is free for alice's job (the service sees 2 CPUs)
    alice = pwd.getpwnam(account_name("alice", hub.account_prefix))
    paths = {
        "own dataset": str(mine),
        "own datasets folder": str(mine.parents[1]),
        "bob's dataset": str(theirs),
        "bob's project": str(theirs.parents[3]),
        "bob's home": str(home / "users" / "bob"),
        "secrets": str(home / "hub" / "secrets.json"),
        "hub database": str(home / "hub" / "jupyterhub.sqlite"),
        "cookie secret": str(home / "hub" / "jupyterhub_cookie_secret"),
        "hub configuration": str(home / "hub" / "jupyterhub_config.py"),
        "catalog database": str(home / "kpl.sqlite"),
        "uploads": str(home / "uploads"),
    }
    renames = {
        "rename own project's datasets folder": str(mine.parents[2]),
        "rename own project's dataset": str(mine.parents[1]),  # the platform's, in the sticky datasets/
    }
    refused = {key: "refused" for key in [*paths, *renames] if not key.startswith("own")}
    code = f"PATHS = {paths!r}\nRENAMES = {renames!r}\n{PROBE}"

    report = probed(asyncio.run(run_in_kernel(hub, server["url"], hub.user_token("alice"), code)))
    assert report == {"uid": alice.pw_uid, "own dataset": "read", "own datasets folder": "read", **refused}
    assert alice.pw_uid != 0

    # a job alice submits through the shared service runs as her, with the same limits on what it reads
    algorithm = home.parent / "probe"
    algorithm.mkdir()
    (algorithm / "probe.py").write_text(code)
    (algorithm / "environment.yml").write_text(
        "version: 1\nimage:\n  runs: []\ntrain:\n  resource:\n    limits:\n      cpu: 1\n"
        "      memory: 512\n  cmd: python probe.py\n"
    )
    hub.platform_call("catalog.add_algorithm", "vision", algorithm, name="probe")
    submitted = hub.http.post(
        f"{hub.url}/services/kpl/api/jobs?project=vision",
        json={"algorithm": "probe", "function": "train"},
        headers={"Authorization": f"token {hub.user_token('alice')}"},
        timeout=60,
    )
    assert submitted.status_code == 201, submitted.text
    job_url = f"/services/kpl/api/jobs/{submitted.json()['id']}?project=vision"
    token = hub.user_token("alice")
    ended = ("succeeded", "failed", "lost")
    with contextlib.suppress(AssertionError):
        wait_for(lambda: hub.get(job_url, token).json()["state"] in ended, "the job's end")
    job = hub.get(job_url, token).json()
    if job["state"] not in ended:
        run_dir = home / "storage" / "projects" / "vision" / "jobs" / job["id"]
        logs = {
            name: (run_dir / name).read_text()
            for name in ("supervisor.log", "output.log")
            if (run_dir / name).exists()
        }
        listing = sorted(str(p) for p in run_dir.parent.rglob("*"))
        raise AssertionError(f"the job did not end: {job}\n{logs}\n{listing}\n{hub.log()[-3000:]}")
    assert job["state"] == "succeeded", job
    report = probed(job["last_log_lines"])
    assert report == {"uid": alice.pw_uid, "own dataset": "read", "own datasets folder": "read", **refused}

    # a deployment alice makes serves from her account too: the same report, at its server's start
    serve = home.parent / "probe-serve"
    serve.mkdir()
    (serve / "serve.py").write_text(
        f"{code}\nfrom kpl_helper import deploy\n"
        "deploy.serve(lambda data, content_type: deploy.ClassificationResponse.dumps(1, 1, 1, 0, 'ok'))\n"
    )
    (serve / "environment.yml").write_text(
        "version: 1\nimage:\n  runs: []\ndeploy:\n  resource:\n    limits:\n      cpu: 0.5\n"
        "      memory: 256\n  cmd: python serve.py\n"
    )
    weights = home.parent / "weights"
    weights.mkdir()
    (weights / "label.txt").write_text("ok")
    hub.platform_call("catalog.add_algorithm", "vision", serve, name="probe-serve")
    model = hub.platform_call("catalog.add_model", "vision", "probe-model", weights, result="ref")
    api = f"{hub.url}/services/kpl/api/deployments"
    created = hub.http.post(
        f"{api}?project=vision",
        json={"name": "probe", "model": model, "algorithm": "probe-serve"},
        headers={"Authorization": f"token {token}"},
        timeout=60,
    )
    assert created.status_code == 201, created.text
    try:
        wait_for(
            lambda: (
                hub.get("/services/kpl/api/deployments/probe?project=vision", token).json()["state"]
                in ("ready", "failed")
            ),
            "the deployment's replica",
        )
        shown = hub.get("/services/kpl/api/deployments/probe?project=vision", token).json()
        assert shown["state"] == "ready", shown
        logs = hub.get("/services/kpl/api/deployments/probe/logs?project=vision", token).json()
        report = probed("".join(replica["text"] for replica in logs["logs"]))
        assert report == {
            "uid": alice.pw_uid,
            "own dataset": "read",
            "own datasets folder": "read",
            **refused,
        }
    finally:
        deleted = hub.http.delete(
            f"{api}/probe?project=vision", headers={"Authorization": f"token {token}"}, timeout=60
        )
        assert deleted.status_code == 200, deleted.text


async def run_in_terminal(hub: Hub, server_url: str, token: str, line: str, until: str) -> str:
    """Open a terminal in the user's server, type `line`, return what it shows once `until` is shown."""
    made = hub.http.post(
        f"{hub.url}{server_url}api/terminals", headers={"Authorization": f"token {token}"}, timeout=60
    )
    assert made.status_code == 200, made.text
    url = f"ws://127.0.0.1:{hub.port}{server_url}terminals/websocket/{made.json()['name']}"
    socket = await websocket_connect(HTTPRequest(url, headers={"Authorization": f"token {token}"}))
    socket.write_message(json.dumps(["stdin", line + "\r"]))
    shown = ""
    try:
        while until not in shown:
            message = await asyncio.wait_for(socket.read_message(), 120)
            assert message is not None, f"the terminal closed; it showed:\n{shown}"
            kind, *content = json.loads(message)
            if kind == "stdout":
                shown += content[0]
    except TimeoutError:
        raise AssertionError(f"the terminal never showed {until!r}; it showed:\n{shown}") from None
    finally:
        socket.close()
    return shown


def test_kpl_lab_and_python_are_the_users_own_in_notebooks_and_terminals(isolated_hub: Hub, user_python: str):
    hub = isolated_hub
    hub.start()
    hub.add_project("vision", ["alice"], {})
    assert hub.spawn("alice").status_code in (201, 202)
    server = hub.wait_ready("alice")
    token = hub.user_token("alice")
    programs = str(Path(user_python).parent)

    # a notebook's `!` commands: the users' Python's folder first, its kpl-lab run by that Python
    printed = asyncio.run(
        run_in_kernel(
            hub,
            server["url"],
            token,
            "import os\nprint('PATH0', os.environ['PATH'].split(':')[0])\n"
            "!kpl-lab --help | head -n 1\n!python -c 'import kpl_lab, sys; print(\"SYS\", sys.executable)'\n"
            "!head -n 1 $(which kpl-lab)",
        )
    )
    assert f"PATH0 {programs}" in printed, printed
    assert "usage: kpl-lab" in printed and "Permission denied" not in printed, printed
    assert f"SYS {programs}/python" in printed, printed
    assert f"#!{user_python}" in printed, printed

    # a terminal's shell keeps the server's PATH: kpl-lab and python are found there too
    shown = asyncio.run(
        run_in_terminal(
            hub,
            server["url"],
            token,
            "kpl-lab --help | head -n 1; python -c 'import kpl_lab; print(6 * 7, \"found\")'",
            until="42 found",
        )
    )
    assert "usage: kpl-lab" in shown and "command not found" not in shown, shown


def test_an_account_of_another_home_is_refused_on_the_spawn_page_then_adopted_once_that_home_is_gone(
    isolated_hub: Hub, open_folder: Path
):
    hub = isolated_hub
    other = open_folder / "another-home"
    other.mkdir()
    name = account_name("carol", hub.account_prefix)
    subprocess.run(["useradd", "--no-create-home", "--comment", f"kpl-lab {other}", name], check=True)
    hub.start()
    hub.add_project("vision", ["carol"], {})

    # carol starts her notebook from the spawn form in her browser: the page says why it cannot start
    with requests.Session() as browser:
        login = browser.get(f"{hub.url}/hub/login", timeout=60)
        xsrf = re.search(r'name="_xsrf" value="([^"]+)"', login.text).group(1)
        signed_in = browser.post(
            f"{hub.url}/hub/login", data={"username": "carol", "password": "x", "_xsrf": xsrf}, timeout=60
        )
        assert signed_in.status_code == 200, signed_in.text[-2000:]
        form = browser.get(f"{hub.url}/hub/spawn/carol", timeout=60).text
        posted = {"project": "vision", "profile": re.findall(r'name="profile" value="([^"]+)" checked', form)}
        posted |= dict(re.findall(r'<input type="number" name="([^"]+)" value="([^"]*)"', form))
        action = html.unescape(re.search(r'id="spawn_form"\s+action="([^"]+)"', form).group(1))
        page = browser.post(hub.url + action, data=posted, timeout=60)  # its _xsrf in the action's query
        shown = page.text
        if name not in shown:  # a slower refusal: the spawn-pending page shows its progress events' last
            shown = hub.api("GET", "users/carol/server/progress").text
    for said in (name, f"KPL Lab home {other}", f"userdel {name}", "--account-prefix"):
        assert said in shown, shown[-6000:]
    assert "didn't respond" not in shown
    assert hub.server("carol") is None

    other.rmdir()  # that home is gone (a reinstall): the account is taken over and the notebook starts
    assert hub.spawn("carol").status_code in (201, 202)
    server = hub.wait_ready("carol")
    account = pwd.getpwnam(name)
    assert account.pw_dir == str(hub.home / "users" / "carol")
    assert account.pw_gecos == f"kpl-lab {hub.home}"
    assert psutil.Process(server["state"]["pid"]).uids().real == account.pw_uid
    answer = hub.get(f"{server['url']}api/status", hub.user_token("carol"))
    assert answer.status_code == 200, answer.text
