"""What an outside check did as a project member to `kpl-lab up` run as root, each case done again here.

Issue #29: a member's model file ran as root, her processes held the admin's token, a 641-byte
YAML ate the service's memory, DuckDB state crossed projects, search spaces had no bounds, the
gateway's HTTP parser took what RFC 9112 refuses. The platform runs as its own account here,
members' content only in their project's sandboxed workers.
"""

from __future__ import annotations

import contextlib
import io
import json
import pwd
import socket
import threading
import zipfile
from pathlib import Path

import psutil

from kpl_lab.engine import environment
from kpl_lab.privileged.rules import sandbox_account
from kpl_lab.testing.attacks import BILLION_LAUGHS, setstate_model

from .conftest import Up, wait_for

# what each kind of member process may find in its environment beyond the allowlist (its contract)
CONTRACT = {
    "job": {
        "HOME", "USER", "LOGNAME", "PYTHONUNBUFFERED", "KPL_INNER", "KPL_ENV", "KPL_ENV_TASK_ID",
        "KPL_ENV_FUNCTION", "KPL_ENV_INPUT_ROOT_PATH", "KPL_ENV_OUTPUT_ROOT_PATH", "KPL_ENV_PARAMETER",
        "KPL_PARAMETER_FILE", "KPL_EVENTS_FILE", "KPL_RUN_DIR", "CUDA_VISIBLE_DEVICES",
        "ASCEND_RT_VISIBLE_DEVICES", "OMP_NUM_THREADS", "PWD", "SHLVL", "_",  # the last three: its shell's
    },
    "sandbox": {"HOME"},
    "notebook": {
        "HOME", "USER", "SHELL", "KPL_PROJECT", "KPL_PROFILE", "KPL_LAB_HOME", "KPL_LIMITS",
        "KPL_SERVICE_URL", "CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES", "OMP_NUM_THREADS",
        "JPY_API_TOKEN", "JUPYTERHUB_SINGLEUSER_APP", "PYTHONPATH", "CONDA_ROOT", "CONDA_DEFAULT_ENV",
        "VIRTUAL_ENV",
    },
}  # fmt: skip


def upload_algorithm(up: Up, token: str, project: str, name: str, files: dict[str, str]) -> None:
    """Upload an algorithm folder (as a zip) into a project as its member."""
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w") as archive:
        for path, text in files.items():
            archive.writestr(f"{name}/{path}", text)
    answer = up.post(up.api(f"algorithms?name={name}", project), token, data=data.getvalue())
    assert answer.status_code == 201, answer.text


def test_a_models_code_never_runs_and_its_views_hold_no_one_up(up: Up):
    up.project("red", ["alice"])
    up.project("blue", ["bob"])
    alice, bob = up.token("alice"), up.token("bob")
    victim = up.folder / "root-only"  # what the model writes when anything loads it
    victim.write_bytes(b"root's file")
    victim.chmod(0o600)
    model = up.folder / "evil.pt"
    setstate_model(str(victim)).save(str(model))
    assert victim.read_bytes() == b"root's file"  # saving runs nothing
    created = up.post(up.api("models?name=evil&filename=evil.pt", "red"), alice, data=model.read_bytes())
    assert created.status_code == 201, created.text
    structure = up.api(f"models/evil/versions/{created.json()['version']}/structure", "red")

    answers: list = []
    views = [threading.Thread(target=lambda: answers.append(up.get(structure, alice))) for _ in range(4)]
    for view in views:
        view.start()
    # another project is answered while four structure views run (no timing asserted: the model's
    # code runs nowhere, its file is read in red's sandboxed worker, not in the service)
    others = [up.get(up.api("datasets", "blue"), bob) for _ in range(5)]
    for view in views:
        view.join()

    assert [a.status_code for a in answers] == [200] * 4, [a.text for a in answers]
    files = answers[0].json()["files"]
    entry = next((f for f in files if f["path"].endswith(".pt")), files)
    assert isinstance(entry, dict), files
    assert entry["format"] == "torchscript" and any("__setstate__" in name for name in entry["not_run"]), (
        entry
    )
    assert victim.read_bytes() == b"root's file" and oct(victim.stat().st_mode)[-3:] == "600"
    assert [a.status_code for a in others] == [200] * 5, [a.text for a in others]


def test_a_yaml_bomb_and_deep_nesting_are_refused_at_once_and_cost_the_service_nothing(up: Up):
    up.project("yaml", ["carol"])
    carol = up.token("carol")
    service = up.service_process()
    # a harmless document first: what validation imports on first use is not the bomb's cost
    plain = up.post(
        up.api("pipelines/validate", "yaml"), carol, json={"text": "version: 1\nname: p\nnodes: {}\n"}
    )
    assert plain.status_code == 200, plain.text
    before = service.memory_info().rss
    bomb = up.post(up.api("pipelines/validate", "yaml"), carol, json={"text": BILLION_LAUGHS})
    deep = up.post(up.api("pipelines/validate", "yaml"), carol, json={"text": "[" * 2048})
    grown = service.memory_info().rss - before
    assert bomb.status_code in (200, 400), bomb.text
    problems = bomb.json()["problems"] if bomb.status_code == 200 else [bomb.json()]
    assert any("anchor" in json.dumps(problem) or "alias" in json.dumps(problem) for problem in problems)
    assert deep.status_code in (200, 400) and "nest" in deep.text, deep.text
    assert grown < 50 << 20, grown


def test_no_query_engine_state_is_shared_between_projects(up: Up):
    up.project("alpha", ["dave"])
    up.project("beta", ["erin"])
    dave, erin = up.token("dave"), up.token("erin")
    rows = {"path": "a.txt", "contentType": "text/plain", "content": b"x"}
    for token, project in ((dave, "alpha"), (erin, "beta")):
        data = io.BytesIO()
        with zipfile.ZipFile(data, "w") as archive:
            archive.writestr("a.txt", rows["content"])
        answer = up.post(up.api("datasets?name=raw&format=import", project), token, data=data.getvalue())
        assert answer.status_code == 201, answer.text

    def check(token: str, project: str, query: str) -> dict:
        text = (
            "version: 1\nname: q\nnodes:\n  raw: {type: dataset, dataset: raw}\n"
            f"  pick: {{type: sql, inputs: {{a: raw}}, query: {json.dumps(query)}}}\n"
        )
        answer = up.post(up.api("pipelines/validate", project), token, json={"text": text})
        assert answer.status_code == 200, answer.text
        return answer.json()

    made = check(dave, "alpha", "CREATE TABLE leak AS SELECT 42 AS answer")
    assert not made["ok"] and "only one SELECT" in json.dumps(made["problems"])
    seen = check(erin, "beta", "SELECT * FROM leak")
    assert not seen["ok"] and "reads only its inputs" in json.dumps(seen["problems"])
    assert check(erin, "beta", "SELECT path FROM a")["ok"]
    assert check(dave, "alpha", "SELECT path FROM a")["ok"]  # alpha's worker was reset after its CREATE
    # each project's SQL was checked by a worker of its own sandbox account, none in the service
    workers = set()
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):  # a worker just reset may be a zombie, or gone
            if "kpl_lab.sandbox.worker" in " ".join(process.cmdline()):
                workers.add(process.uids().real)
    expected = {pwd.getpwnam(sandbox_account(name, up.prefix)).pw_uid for name in ("alpha", "beta")}
    assert expected <= workers, (expected, workers)
    assert pwd.getpwnam(up.service).pw_uid not in workers


def test_a_huge_search_space_is_refused_naming_its_field(up: Up):
    up.project("search", ["frank"])
    frank = up.token("frank")
    upload_algorithm(
        up,
        frank,
        "search",
        "toy",
        {
            "environment.yml": "version: 1\nimage:\n  runs: []\ntrain:\n  cmd: python -c 'print(1)'\n",
            "parameter.yml": "lr: 0.1\n",
        },
    )
    body = {  # a grid of 3 million values
        "name": "huge",
        "algorithm": "toy",
        "objective": {"metric": "loss", "direction": "minimize"},
        "space": {"lr": {"type": "float", "low": 0.0, "high": 3.0, "step": 1e-6}},
        "sampler": {"name": "grid"},
    }
    answer = up.post(up.api("experiments", "search"), frank, json=body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["field"].startswith("space.lr"), answer.json()


def test_no_member_process_holds_a_credential_of_the_platforms(up: Up):
    up.project("env", ["gina"])
    gina = up.token("gina")
    secrets = up.secrets()
    upload_algorithm(
        up,
        gina,
        "env",
        "sleeper",
        {
            "environment.yml": "version: 1\nimage:\n  runs: []\ntrain:\n  resource:\n    limits:\n"
            "      cpu: 0.5\n      memory: 256\n  cmd: python -c 'import time; time.sleep(60)'\n",
        },
    )
    job = up.post(up.api("jobs", "env"), gina, json={"algorithm": "sleeper", "function": "train"})
    assert job.status_code == 201, job.text
    spawned = up.hub("POST", "users/gina/server", json={})
    assert spawned.status_code in (201, 202), spawned.text
    validated = up.post(
        up.api("pipelines/validate", "env"), gina, json={"text": "version: 1\nname: e\nnodes: {}\n"}
    )
    assert validated.status_code == 200, validated.text
    gina_uid = pwd.getpwnam(f"{up.prefix}gina").pw_uid
    sandbox_uid = pwd.getpwnam(sandbox_account("env", up.prefix)).pw_uid

    def processes() -> dict[str, psutil.Process]:
        found = {}
        for process in psutil.process_iter():
            try:
                line, uid = " ".join(process.cmdline()), process.uids().real
            except psutil.Error:
                continue
            if uid == gina_uid and "time.sleep(60)" in line:
                found["job"] = process
            elif uid == gina_uid and "jupyterhub.singleuser" in line:
                found["notebook"] = process
            elif uid == sandbox_uid and "kpl_lab.sandbox.worker" in line:
                found["sandbox"] = process
        return found if len(found) == 3 else None

    found = wait_for(processes, "a job, a notebook and a sandboxed worker of gina's project")
    for kind, process in found.items():
        env = process.environ()
        unexpected = {key for key in env if not environment.passes(key) and key not in CONTRACT[kind]}
        if kind == "notebook":  # JupyterHub's own for her server (its token is hers, checked below)
            unexpected = {key for key in unexpected if not key.startswith("JUPYTERHUB_")}
        assert unexpected == set(), (kind, sorted(unexpected))
        leaked = [name for name, secret in secrets.items() if any(secret in value for value in env.values())]
        assert leaked == [], (kind, leaked)
    up.hub("DELETE", "users/gina/server")
    up.post(up.api(f"jobs/{job.json()['id']}/stop", "env"), gina)


def raw_http(port: int, data: bytes) -> bytes:
    """Send raw bytes to the gateway and return its whole answer (it closes after a malformed request)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as connection:
        connection.sendall(data)
        chunks = []
        while chunk := connection.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_the_gateway_refuses_what_http_forbids(up: Up):
    config = (up.home / "hub" / "jupyterhub_config.py").read_text()
    port = int(config.split("'name': 'kpl-gateway', 'url': 'http://127.0.0.1:")[1].split("'")[0])
    target = b"POST /kpl/api/deployments/x/predict HTTP/1.1\r\nHost: x\r\n"
    cases = {
        "CL and TE": (target + b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", b" 400 "),
        "a 70 KB head": (target + b"X-Big: " + b"a" * 70_000 + b"\r\n\r\n", b" 431 "),
        "a bad chunk size": (target + b"Transfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n", b" 400 "),
        "a huge chunk size line": (target + b"Transfer-Encoding: chunked\r\n\r\n" + b"f" * 70_000, b" 400 "),
    }
    for what, (request, status) in cases.items():
        answer = raw_http(port, request)
        assert (
            answer.split(b"\r\n", 1)[0].startswith(b"HTTP/1.1") and status in answer.split(b"\r\n", 1)[0]
        ), (
            what,
            answer[:200],
        )


def test_only_the_helper_runs_as_root(up: Up):
    service = pwd.getpwnam(up.service).pw_uid
    family = []  # (uid, command line) of each descendant still running once read
    for process in psutil.Process(up.process.pid).children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):  # a sandbox worker ending as it is listed
            family.append((process.uids().real, " ".join(process.cmdline())))
    roots = [line for uid, line in family if uid == 0]
    assert len(roots) == 1 and "kpl_lab.privileged.helper" in roots[0], roots
    names = " ".join(line for uid, line in family if uid == service)
    for part in ("jupyterhub", "kpl_lab.hub.proxy", "kpl_lab.hub.service"):
        assert part in names, names
    assert Path(up.home, "run", "helper.sock").stat().st_mode & 0o777 == 0o660
