"""The KPL admin API against a real hub: users, projects and members created there, as the admin guide says."""

from __future__ import annotations

import re
from pathlib import Path

import requests

from .conftest import Hub

GUIDE = Path(__file__).parents[2] / "docs" / "admin-guide.md"


def post(hub: Hub, token: str, path: str, body: dict):
    with requests.Session() as session:
        return session.post(
            f"{hub.url}/services/kpl/admin/api/{path}",
            json=body,
            headers={"Authorization": f"token {token}"},
            timeout=60,
        )


def test_the_admin_creates_users_projects_and_members(hub: Hub):
    token = hub.user_token("admin")
    answer = post(hub, token, "projects/space/members", {"user": "ivan"})
    assert answer.status_code == 404 and "project 'space'" in answer.json()["message"]
    answer = post(hub, token, "projects", {"name": "space", "quota": {"cpu": 2, "notebooks": 1}})
    assert answer.status_code == 201, answer.text
    assert answer.json() == {"name": "space", "quota": {"cpu": 2, "notebooks": 1}}
    answer = post(hub, token, "projects/space/members", {"user": "ivan"})
    assert answer.status_code == 404 and "create the user first" in answer.json()["message"]
    assert post(hub, token, "users", {"name": "ivan"}).status_code == 201
    assert post(hub, token, "users", {"name": "ivan"}).status_code == 409
    assert post(hub, token, "projects/space/members", {"user": "ivan"}).status_code == 201
    group = hub.api("GET", "groups/space").json()
    assert group["users"] == ["ivan"] and group["properties"]["kpl_quota"] == {"cpu": 2, "notebooks": 1}
    answer = post(hub, token, "projects", {"name": "bad", "quota": {"cpu": -1}})
    assert answer.status_code == 400 and answer.json()["field"] == "cpu"


def test_a_member_may_not_create_anything(hub: Hub):
    hub.add_project("sea", ["jane"], {})
    answer = post(hub, hub.user_token("jane"), "users", {"name": "intruder"})
    assert answer.status_code == 403
    assert hub.api("GET", "users/intruder").status_code == 404


def test_the_guides_steps_work_in_their_order(hub: Hub):
    """Run the guide's curl steps (user, project, member, quota) with the hub's URL and an admin token."""
    text = GUIDE.read_text()
    section = text[text.index("## Projects and quotas") : text.index("## The KPL admin page")]
    commands = re.findall(r"^\$ (curl .*?)(?<!\\)$", section.replace("\\\n", " "), flags=re.M)
    assert len(commands) >= 4
    token = hub.user_token("admin")
    for command in commands:
        method = re.search(r"-X (\w+)", command)[1]
        url = re.search(r"(http://127\.0\.0\.1:8000\S+)", command)[1].replace(
            "http://127.0.0.1:8000", hub.url
        )
        body = re.search(r"-d '([^']*)'", command)
        with requests.Session() as session:
            answer = session.request(
                method,
                url,
                data=body[1] if body else None,
                headers={"Authorization": f"token {token}"},
                timeout=60,
            )
        assert answer.status_code in (200, 201), f"{command}: {answer.status_code} {answer.text}"
    group = hub.api("GET", "groups/vision").json()
    assert "alice" in group["users"] and group["properties"]["kpl_quota"]["gpu"] == 2
