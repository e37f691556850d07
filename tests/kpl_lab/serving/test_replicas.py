"""Replicas through the privileged helper: the server runs as the deployment's user, the supervisor trusts only its own files."""

from __future__ import annotations

import grp
import json
import os
import pwd
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from traitlets.config import Config

from kpl_lab.engine import identity
from kpl_lab.engine.forkserver import PACKAGE_PARENT
from kpl_lab.errors import Unavailable
from kpl_lab.platform import Platform

from .conftest import port_algorithm, post, ready_url, toy_algorithm

WAIT = 120.0

# the toy server, reporting at start who it runs as and what it can read
REPORT = """
import json, os
report = {"uid": os.getuid(), "groups": sorted(os.getgroups()), "home": os.environ.get("HOME"),
          "hub_token": os.environ.get("JUPYTERHUB_API_TOKEN")}
for key, path in (("other_project", os.environ["OTHER_PROJECT_FILE"]), ("catalog", os.environ["CATALOG_FILE"])):
    try:
        open(path).read()
        report[key] = "read"
    except PermissionError:
        report[key] = "refused"
with open(os.path.join(os.environ["KPL_ENV_OUTPUT_ROOT_PATH"], "report.json"), "w") as out:
    json.dump(report, out)
"""


def _platform(home: Path, helper_socket: Path, user_python: str) -> Platform:
    """Return a platform that runs users' jobs and replicas as their accounts, through the helper."""
    return Platform(
        home=str(home),
        config=Config(
            {
                "Platform": {
                    "helper_socket": str(helper_socket),
                    # the probe's paths; an administrator passing the service's token on gets it withheld
                    "passed_environment": ["OTHER_PROJECT_FILE", "CATALOG_FILE", "JUPYTERHUB_API_TOKEN"],
                },
                "Ledger": {"cpu": 16.0, "memory": 65536},
                "LocalExecutor": {"python": user_python},
            }
        ),
    )


def test_a_replica_runs_as_the_deployments_user_in_its_projects_group(
    account_prefix, open_folder, user_python, monkeypatch, privileged_helper
):
    home = open_folder / "home"
    other = home / "storage" / "projects" / "audio"
    other.mkdir(parents=True)
    (other / "data.txt").write_text("audio's")
    identity.secure_project(other, identity.ensure_group(identity.group_name("audio", account_prefix)))
    monkeypatch.setenv("OTHER_PROJECT_FILE", str(other / "data.txt"))
    monkeypatch.setenv("CATALOG_FILE", str(home / "kpl.sqlite"))
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "the service's own token")  # never a user's
    umask = os.umask(0o027)  # as `kpl-lab up` runs the platform: its files are not for other accounts
    platform = _platform(home, privileged_helper, user_python)
    try:
        algorithm = toy_algorithm(open_folder / "toy-serve")
        (algorithm / "serve.py").write_text(REPORT + (algorithm / "serve.py").read_text())
        platform.catalog.add_algorithm("vision", algorithm, name="toy-serve")
        (open_folder / "model").mkdir()
        (open_folder / "model" / "label.txt").write_text("cat")
        model = platform.catalog.add_model("vision", "toy-model", open_folder / "model").ref
        service = platform.deployments
        service.create("vision", "pets", model, algorithm="toy-serve", user="alice")
        service.wait("vision", "pets", WAIT)

        (row,) = service.get("vision", "pets").replica_rows
        run_dir = service.run_dir(row)
        account = pwd.getpwnam(identity.account_name("alice", account_prefix))
        vision = grp.getgrnam(identity.group_name("vision", account_prefix)).gr_gid
        report = json.loads((run_dir / "outputs" / "report.json").read_text())
        assert report == {
            "uid": account.pw_uid,
            "groups": [vision],
            "home": str(home / "users" / "alice"),
            "hub_token": None,
            "other_project": "refused",
            "catalog": "refused",
        }
        status = json.loads((run_dir / "status.json").read_text())
        assert os.stat(f"/proc/{status['pid']}").st_uid == account.pw_uid
        # the run folder is hers, the platform's group reads it; what runs and as whom stays the platform's
        found = run_dir.stat()
        assert (found.st_uid, found.st_gid, stat.S_IMODE(found.st_mode)) == (
            account.pw_uid,
            os.getegid(),
            0o2770,
        )
        assert (run_dir / "outputs").stat().st_uid == account.pw_uid
        for path in (run_dir / "replica.json", run_dir / "status.json"):
            assert path.stat().st_uid == os.geteuid()
            assert not path.stat().st_mode & (stat.S_IWGRP | stat.S_IWOTH)

        # it listens on a socket in a folder of alice's alone, not on the port it was given
        url = ready_url(platform, "vision", "pets")
        assert url.startswith("unix:")
        folder = Path(url.removeprefix("unix:")).parent
        found = folder.stat()
        assert (found.st_uid, found.st_gid, stat.S_IMODE(found.st_mode)) == (
            account.pw_uid,
            os.getegid(),
            0o2770,
        )
        status_code, answer = post(url, b"img-1")
        assert (status_code, answer["class_name"]) == (200, "cat")
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", status["port"]), timeout=5)
        # bob, on this machine but not in the project, cannot call it around the gateway
        bob = identity.ensure_account(identity.account_name("bob", account_prefix), home / "users" / "bob")
        probe = f"import socket; socket.socket(socket.AF_UNIX).connect({url.removeprefix('unix:')!r})"
        refused = subprocess.run(
            [user_python, "-c", probe],
            user=bob.pw_uid,
            group=bob.pw_gid,
            extra_groups=[],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert refused.returncode != 0 and "PermissionError" in refused.stderr, refused.stderr
    finally:
        for deployment in platform.deployments.list("vision"):
            platform.deployments.delete("vision", deployment.name)
        platform.close()
        os.umask(umask)
    assert not folder.exists()  # the supervisor removed its socket's folder as it stopped


def test_a_users_server_that_answers_on_its_tcp_port_is_stopped_and_the_replica_fails(
    account_prefix, open_folder, user_python, privileged_helper
):
    platform = _platform(open_folder / "home", privileged_helper, user_python)
    try:
        # a server of its own that takes the port and ignores the socket
        platform.catalog.add_algorithm(
            "vision", port_algorithm(open_folder / "own-server"), name="own-server"
        )
        (open_folder / "model").mkdir()
        (open_folder / "model" / "label.txt").write_text("cat")
        model = platform.catalog.add_model("vision", "toy-model", open_folder / "model").ref
        service = platform.deployments
        service.create("vision", "pets", model, algorithm="own-server", user="alice")
        with pytest.raises(Unavailable) as refused:
            service.wait("vision", "pets", WAIT)
        assert "the server answers on TCP port" in str(refused.value)
        assert "must listen on the Unix socket in $KPL_DEPLOY_SOCKET" in str(refused.value)
        (replica,) = service.replica_states(service.get("vision", "pets"))
        assert (replica["state"], replica["restarts"], replica["url"]) == ("failed", 0, None)
        # the server was stopped: its port answers nobody
        (row,) = service.get("vision", "pets").replica_rows
        port = json.loads((service.run_dir(row) / "status.json").read_text())["port"]
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5)
    finally:
        for deployment in platform.deployments.list("vision"):
            platform.deployments.delete("vision", deployment.name)
        platform.close()


def test_the_supervisor_refuses_a_replica_json_it_did_not_write(account_prefix, open_folder):
    name = identity.account_name("mallory", account_prefix)
    account = identity.ensure_account(name, open_folder / "users" / "mallory")
    run_dir = open_folder / "replica"
    run_dir.mkdir()
    marker = open_folder / "ran-as-root"
    # what a project member could leave in a run folder: a server that would run as the platform
    forged = {"argv": [sys.executable, "-c", f"open({str(marker)!r}, 'w')"], "cwd": str(run_dir), "env": {}}
    (run_dir / "replica.json").write_text(json.dumps(forged))
    os.chown(run_dir / "replica.json", account.pw_uid, account.pw_gid)
    env = {**os.environ, "PYTHONPATH": PACKAGE_PARENT}
    done = subprocess.run(
        [sys.executable, "-m", "kpl_lab.serving.replica", str(run_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "replica.json: missing, or not written by this account" in done.stderr
    time.sleep(0.2)
    assert not marker.exists() and not (run_dir / "status.json").exists()
