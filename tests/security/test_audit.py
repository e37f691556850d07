"""The audit log of `kpl-lab up` as root: each listed action, done as people do it, is recorded once.

Issue #34 lists logins, project membership and quota changes, deployments and their keys, model
uploads, admin actions and refused requests; each is done here through the hub's proxy, as the
admin page and a member's client do it, and read back from the admin API and its JSON-lines export.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from kpl_lab.client import Client

from ..kpl_lab.serving.conftest import ENVIRONMENT, SERVE
from .conftest import Up

ADMIN = "/services/kpl/admin/api/"


def zipped(folder: Path, files: dict[str, str]) -> Path:
    """Write files into a zip of one folder named like the archive; return its path."""
    archive = folder.with_suffix(".zip")
    with zipfile.ZipFile(archive, "w") as handle:
        for name, text in files.items():
            handle.writestr(f"{folder.name}/{name}", text)
    return archive


def test_each_listed_action_is_audited_with_who_what_and_from_where(up: Up, tmp_path: Path):
    def admin(method: str, path: str, **kwargs):
        answer = up.request(method, ADMIN + path, up.admin, **kwargs)
        assert answer.status_code in (200, 201), answer.text
        return answer

    admin("POST", "users", json={"name": "ada"})
    admin("POST", "projects", json={"name": "ledger", "quota": {"cpu": 4}})
    admin("POST", "projects/ledger/members", json={"user": "ada"})
    admin("PUT", "projects/ledger/quota", json={"cpu": 3, "memory": 4096})
    ada = up.token("ada")  # a login with her password, as the hub's token page takes it

    client = Client(up.url, ada, project="ledger", timeout=120)
    client.upload_algorithm(zipped(tmp_path / "echo", {"environment.yml": ENVIRONMENT, "serve.py": SERVE}))
    client.upload_model(zipped(tmp_path / "labels", {"label.txt": "seven\n"}), name="labels")
    client.deploy("api", "labels", algorithm="echo")
    key = client.create_deployment_key("api")
    client.delete_deployment("api")
    refused = up.get(ADMIN + "audit", ada)  # a member reading the audit log
    assert refused.status_code == 403, refused.text

    events = admin("GET", "audit?limit=1000").json()["events"]
    seen = {(e["action"], e["user"], e["outcome"]): e for e in events if e["user"] in ("admin", "ada")}
    expected = {
        ("login", "ada", "ok"): "hub",
        ("user.create", "admin", "ok"): "ada",
        ("project.create", "admin", "ok"): "ledger",
        ("project.member.add", "admin", "ok"): "ledger/ada",
        ("quota.set", "admin", "ok"): "ledger",
        ("algorithm.upload", "ada", "ok"): None,
        ("model.upload", "ada", "ok"): None,
        ("deployment.create", "ada", "ok"): "api",
        ("deployment.key.create", "ada", "ok"): None,
        ("deployment.delete", "ada", "ok"): "api",
        ("request.refused", "ada", "refused"): None,
    }
    missing = [action for action in expected if action not in seen]
    assert missing == [], (missing, sorted(seen))
    for action, target in expected.items():
        event = seen[action]
        assert event["client"] == "127.0.0.1", event  # the caller's address through the proxy
        if target is not None:
            assert event["target"] == target, event
        if action[1] == "ada" and action[0] not in ("login", "request.refused"):  # the admin page: none
            assert event["project"] == "ledger", event
    assert seen[("quota.set", "admin", "ok")]["detail"] == {"quota": {"cpu": 3, "memory": 4096}}
    assert key["key"] not in json.dumps(events)  # a key is shown once, never logged
    assert seen[("request.refused", "ada", "refused")]["status"] == 403

    # filtered by project and exported as JSON lines: the same events, newest first
    page = admin("GET", "audit?project=ledger&user=ada&limit=1000").json()["events"]
    exported = admin("GET", "audit?project=ledger&user=ada&format=jsonl").text.splitlines()
    assert [json.loads(line)["id"] for line in exported] == [e["id"] for e in page]
    assert {e["action"] for e in page} >= {"model.upload", "deployment.create", "deployment.key.create"}
