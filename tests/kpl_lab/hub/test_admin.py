"""The admin page and its API: overview, quota edits written into the hub's group properties."""

from __future__ import annotations

import asyncio
import re
from http.cookies import SimpleCookie

import pytest

from kpl_lab import charts
from kpl_lab.catalog.rules import QUOTA
from kpl_lab.engine.launch import Resources

pytestmark = pytest.mark.databases


async def test_overview_lists_users_projects_quotas_and_capacity(service):
    service.app.monitor.sample(force=True)
    status, body, _ = await service.call("GET", "admin/api/overview", token=service.hub.token("admin"))
    assert status == 200, body
    users = {user["name"]: user for user in body["users"]}
    assert users["admin"]["admin"] is True
    assert users["alice"]["projects"] == ["vision"]
    projects = {project["name"]: project for project in body["projects"]}
    assert set(projects) == {"demo", "vision", "audio", "default"}
    assert projects["vision"]["quota"] == {"cpu": 8, "gpu": 1}
    assert projects["vision"]["members"] == ["alice"]
    assert projects["audio"]["quota"] == {}
    assert projects["vision"]["used"]["cpu"] == 0
    assert body["capacity"]["cpu"] == 4.0
    assert body["capacity"]["memory"] == 4096
    assert body["reservations"] == []
    assert body["live"]["cpu_count"] >= 1
    assert body["totals"]["jobs_running"] == 0


async def test_a_reservation_is_listed_with_its_time_in_utc(service):
    ledger = service.app.platform.jobs.ledger
    ledger.reserve("vision", "notebook", "alice", Resources(cpu=1, memory=512))
    status, body, _ = await service.call("GET", "admin/api/overview", token=service.hub.token("admin"))
    assert status == 200, body
    [held] = body["reservations"]
    assert (held["project"], held["kind"], held["owner"], held["cpu"]) == ("vision", "notebook", "alice", 1.0)
    assert held["since"].endswith("+00:00")  # the same on SQLite (naive) and PostgreSQL (aware)


async def test_history_keeps_one_row_a_period_and_live_use_every_round(service):
    monitor = service.app.monitor
    monitor.history_seconds = 3600.0
    for _ in range(2):
        monitor.sample(force=True)
        monitor.keep_history()
    first = monitor.live
    monitor.sample()
    assert monitor.live is not first
    status, body, _ = await service.call(
        "GET", "admin/api/usage?period=3600", token=service.hub.token("admin")
    )
    assert status == 200, body
    assert len(body["points"]) == 1


async def test_overview_is_for_admins_only(service):
    status, body, _ = await service.call("GET", "admin/api/overview", token=service.hub.token("alice"))
    assert status == 403
    assert "admin" in body["message"]


async def test_quota_edit_writes_the_group_properties(service):
    service.hub.groups["vision"]["other"] = "kept"
    status, body, _ = await service.call(
        "PUT",
        "admin/api/projects/vision/quota",
        token=service.hub.token("admin"),
        body={"cpu": 2, "memory": 1024, "gpu": 0},
    )
    assert status == 200, body
    assert body == {"project": "vision", "quota": {"cpu": 2, "memory": 1024, "gpu": 0}}
    assert service.hub.groups["vision"] == {
        "other": "kept",
        "kpl_quota": {"cpu": 2, "memory": 1024, "gpu": 0},
    }
    # the platform's rules too: the next reservation decides with it, no round needed
    rules = service.app.platform.jobs.ledger.rules
    assert rules.read(QUOTA, "vision") == {"cpu": 2, "memory": 1024, "gpu": 0}


@pytest.mark.parametrize(
    ("quota", "field", "words"),
    [
        ({"cpu": -1}, "cpu", "expected a number >= 0, got -1"),
        ({"cpu": 1, "memory": "lots"}, "memory", "expected a number >= 0, got 'lots'"),
        ({"gpu": True}, "gpu", "expected a number >= 0, got True"),
        ({"disk": 10}, "disk", "unknown quota"),
        ([1, 2], "body", "JSON object"),
    ],
)
async def test_quota_edit_refuses_bad_values_naming_the_field(service, quota, field, words):
    before = dict(service.hub.groups["vision"])
    status, body, _ = await service.call(
        "PUT", "admin/api/projects/vision/quota", token=service.hub.token("admin"), body=quota
    )
    assert status == 400, body
    assert body["field"] == field
    assert words in body["message"]
    assert service.hub.groups["vision"] == before


async def test_quota_edit_of_a_project_the_hub_lacks_is_not_found(service):
    status, body, _ = await service.call(
        "PUT", "admin/api/projects/nosuch/quota", token=service.hub.token("admin"), body={"cpu": 1}
    )
    assert status == 404, body
    assert "nosuch" in body["message"]


async def test_quota_edit_is_for_admins_only(service):
    status, _, _ = await service.call(
        "PUT", "admin/api/projects/vision/quota", token=service.hub.token("alice"), body={"cpu": 100}
    )
    assert status == 403
    assert service.hub.groups["vision"]["kpl_quota"] == {"cpu": 8, "gpu": 1}


async def test_admin_page_in_the_browser_saves_a_quota_with_its_xsrf_token(service):
    cookie = service.cookie(service.hub.token("admin"))
    status, page, response = await service.call("GET", "admin", headers={"Cookie": cookie})
    assert status == 200, page
    assert "KPL Lab — admin" in page
    token = re.search(r'data-xsrf="([^"]+)"', page).group(1)
    jar = SimpleCookie()
    for header in response.headers.get_list("Set-Cookie"):
        jar.load(header)
    cookies = "; ".join([cookie, *(f"{name}={morsel.value}" for name, morsel in jar.items())])
    url = "admin/api/projects/demo/quota"

    # the page's script: the cookie and the xsrf token of the page
    status, body, _ = await service.call(
        "PUT", url, body={"cpu": 1}, headers={"Cookie": cookies, "X-XSRFToken": token}
    )
    assert status == 200, body
    assert service.hub.groups["demo"]["kpl_quota"] == {"cpu": 1}

    # another site's form: the cookie alone
    status, _, _ = await service.call("PUT", url, body={"cpu": 9}, headers={"Cookie": cookies})
    assert status == 403
    assert service.hub.groups["demo"]["kpl_quota"] == {"cpu": 1}


async def test_admin_page_refuses_a_member(service):
    cookie = service.cookie(service.hub.token("alice"))
    status, page, _ = await service.call("GET", "admin", headers={"Cookie": cookie})
    assert status == 403
    assert "the admin page is for hub admins" in page


async def test_admin_script_is_served(service):
    status, script, response = await service.call("GET", "admin/admin.js", token=service.hub.token("admin"))
    assert status == 200
    assert "javascript" in response.headers["Content-Type"]
    assert "saveQuota" in script and "new uPlot(" in script


async def test_the_page_loads_uplot_from_the_service(service):
    token = service.hub.token("admin")
    status, page, _ = await service.call("GET", "admin", token=token)
    assert status == 200, page
    assert '<link rel="stylesheet" href="/services/kpl/admin/uPlot.min.css">' in page
    scripts = re.findall(r'<script src="([^"]+)"></script>', page)
    assert scripts == ["/services/kpl/admin/uPlot.iife.min.js", "/services/kpl/admin/admin.js"]  # uPlot first
    status, script, response = await service.call("GET", "admin/uPlot.iife.min.js", token=token)
    assert status == 200 and response.headers["Content-Type"].startswith("text/javascript")
    assert script == charts.asset(charts.UPLOT_SCRIPT) and "var uPlot=" in script
    status, css, response = await service.call("GET", "admin/uPlot.min.css", token=token)
    assert status == 200 and response.headers["Content-Type"].startswith("text/css")
    assert ".u-legend" in css
    status, _, _ = await service.call("GET", "admin/other.js", token=token)
    assert status == 404


async def test_a_missing_uplot_build_is_named(service, monkeypatch, tmp_path):
    monkeypatch.setattr(charts, "STATIC", tmp_path)
    charts.asset.cache_clear()
    try:
        status, body, _ = await service.call("GET", "admin/uPlot.min.css", token=service.hub.token("admin"))
    finally:
        charts.asset.cache_clear()
    assert status == 500
    assert "uPlot.min.css is missing" in body["message"] and "jlpm build:static" in body["message"]


async def test_the_services_root_leads_to_the_admin_page(service):
    status, _, response = await service.call("GET", "")
    assert status == 302
    assert response.headers["Location"] == "/services/kpl/admin"


async def test_a_background_round_reads_quotas_runs_jobs_and_samples(service, caplog):
    service.hub.groups["audio"] = {"kpl_quota": {"gpu": 2}}
    rounds = service.app.rounds(asyncio.get_running_loop())
    await asyncio.get_running_loop().run_in_executor(None, rounds.run)
    assert "background round failed" not in caplog.text
    rules = service.app.platform.jobs.ledger.rules
    assert rules.read(QUOTA, "audio") == {"gpu": 2}
    assert rules.read(QUOTA, "demo")["notebooks"] == 3
    assert service.app.monitor.live["cpu_count"] >= 1
    assert service.app.monitor.snapshot is not None
